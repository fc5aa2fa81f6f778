# The soak's memory sampler inside a guest (bench/lib/soak-remote-probe.mjs):
# appends "VmRSS RssAnon" (KiB) of envd to a log every 100 ms, as the host
# soak samples a local envd, until envd is gone. Perl because the Debian guest
# has perl-base and no other interpreter; it reads /proc itself, so sampling
# costs envd nothing.
#   perl soak-guest-sampler.pl ENVD_PID LOG
use strict;
use warnings;
my ($pid, $log) = @ARGV;
open(my $out, '>>', $log) or die "$log: $!\n";
for (;;) {
  open(my $status, '<', "/proc/$pid/status") or exit 0;
  local $/;
  my $text = <$status>;
  close $status;
  my ($rss) = $text =~ /^VmRSS:\s+(\d+)/m;
  my ($anon) = $text =~ /^RssAnon:\s+(\d+)/m;
  # One write per line: the reader never sees half of one.
  syswrite($out, ($rss // 0) . ' ' . ($anon // 0) . "\n");
  select(undef, undef, undef, 0.1);
}
