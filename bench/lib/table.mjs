// The results as a Markdown table: what run.mjs prints and the README shows.

const text = (v) => (v == null ? '—' : String(v));

export function formatTable(rows) {
  const lines = ['| figure | envd | baseline | ratio | goal | met |', '|---|---|---|---|---|---|'];
  for (const r of rows) {
    const unit = r.unit ? ` ${r.unit}` : '';
    const envd = r.envd == null ? `n/a (${r.note ?? 'missing'})` : `${r.envd}${unit}`;
    const met = r.met === null ? '(report)' : r.met ? 'yes' : '**no**';
    lines.push(`| ${r.name} | ${envd} | ${r.baseline == null ? '—' : `${r.baseline}${unit}`} | ${text(r.ratio)} | ${r.goal} | ${met} |`);
  }
  return lines.join('\n');
}
