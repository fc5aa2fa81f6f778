# What the soak reads of an envd it cannot see from here (a guest's), run
# inside its machine as root through envd's own POST /commands: the same
# figures bench/lib/soak-probe.mjs reads of a local envd, printed as one JSON
# object. Memory peaks and lows come from the sampler's log
# (soak-guest-sampler.pl) past byte OFFSET, so nothing between two probes is
# missed. The probe's own command and the sampler's (their holder and all
# below it) are left out of the process counts, and the probe's own state
# directory out of the state directories: they are the measurement, not envd's
# load.
#   perl soak-guest-probe.pl ENVD_PID STATE_DIR SPOOL_DIR LOG OFFSET
use strict;
use warnings;
my ($pid, $state, $spool, $log, $offset) = @ARGV;
my $marker = 'soak-guest-';

sub slurp {
  open(my $f, '<', $_[0]) or return undef;
  local $/;
  my $text = <$f>;
  close $f;
  return $text;
}

my $status = slurp("/proc/$pid/status") // die "no process $pid\n";
my ($rss) = $status =~ /^VmRSS:\s+(\d+)/m;
my ($anon) = $status =~ /^RssAnon:\s+(\d+)/m;
my ($peak_rss, $peak_anon, $low_rss, $low_anon, $samples) = ($rss, $anon, $rss, $anon, 0);
if (open(my $f, '<', $log)) {
  seek($f, $offset, 0);
  while (my $line = <$f>) {
    last unless $line =~ /^(\d+) (\d+)\n$/;
    $offset += length $line;
    $samples++;
    $peak_rss = $1 if $1 > $peak_rss;
    $peak_anon = $2 if $2 > $peak_anon;
    $low_rss = $1 if $1 < $low_rss;
    $low_anon = $2 if $2 < $low_anon;
  }
  close $f;
}

# The machine's CPU time so far (ticks): busy is all but idle and iowait.
my ($cpu_line) = (slurp('/proc/stat') // '') =~ /^cpu (.*)$/m;
my @cpu = (split ' ', $cpu_line // '')[0 .. 7];
my $cpu_total = 0;
$cpu_total += $_ // 0 for @cpu;
my $cpu_busy = $cpu_total - ($cpu[3] // 0) - ($cpu[4] // 0);

# Descriptors by kind: socket, pipe, anon_inode:<what>, or file.
my %fds;
opendir(my $fd_dir, "/proc/$pid/fd") or die "/proc/$pid/fd: $!\n";
for my $fd (readdir $fd_dir) {
  next if $fd =~ /^\./;
  my $target = readlink("/proc/$pid/fd/$fd") // next;
  my $kind = $target =~ /^socket:/ ? 'socket' : $target =~ /^pipe:/ ? 'pipe' : $target =~ /^anon_inode:/ ? $target : 'file';
  $fds{$kind}++;
}
closedir $fd_dir;

# Every process: ppid, state, argv[0], whole command line.
my (%ppid, %pstate, %argv0, %cmdline, %children);
opendir(my $proc, '/proc') or die "/proc: $!\n";
for my $p (grep { /^\d+$/ } readdir $proc) {
  my $stat = slurp("/proc/$p/stat") // next;
  my $line = slurp("/proc/$p/cmdline") // next;
  my @rest = split / /, substr($stat, rindex($stat, ') ') + 2);
  ($pstate{$p}, $ppid{$p}) = @rest[0, 1];
  $cmdline{$p} = $line;
  $argv0{$p} = (split /\0/, $line)[0] // '';
  push @{ $children{ $ppid{$p} } }, $p;
}
closedir $proc;

my $bin = "$state/bin/";
my $is_holder = sub { index($argv0{ $_[0] }, $bin) == 0 && $ppid{ $_[0] } != $pid };
my %left_out;
my $leave_out = sub {
  my @stack = @_;
  while (@stack) {
    my $p = pop @stack;
    next if $left_out{$p}++;
    push @stack, @{ $children{$p} // [] };
  }
};
for my $p (grep { index($cmdline{$_}, $marker) >= 0 } keys %cmdline) {
  my $top = $p;
  for (my $up = $p; exists $ppid{$up} && $up > 1 && $up != $pid; $up = $ppid{$up}) {
    if ($is_holder->($up)) { $top = $up; last; }
  }
  $leave_out->($top);
}
my @roots = grep { !$left_out{$_} && ($ppid{$_} == $pid || index($argv0{$_}, $bin) == 0) } keys %ppid;
my (%seen, @stack);
@stack = @roots;
while (@stack) {
  my $p = pop @stack;
  next if $left_out{$p} || $seen{$p}++;
  push @stack, @{ $children{$p} // [] };
}
my ($count, $holders, $zombies) = (0, 0, 0);
for my $p (keys %seen) {
  if ($pstate{$p} eq 'Z') { $zombies++; next; }
  $count++;
  $holders++ if $is_holder->($p);
}

sub count_files {
  my ($dir) = @_;
  opendir(my $d, $dir) or return 0;
  my $n = 0;
  for my $entry (grep { !/^\.\.?$/ } readdir $d) {
    my $path = "$dir/$entry";
    $n += (-d $path && !-l $path) ? 1 + count_files($path) : 1;
  }
  closedir $d;
  return $n;
}
sub count_dirs {
  my ($dir) = @_;
  opendir(my $d, $dir) or return 0;
  my $n = grep { !/^\.\.?$/ && -d "$dir/$_" } readdir $d;
  closedir $d;
  return $n;
}
sub count_entries {
  my ($dir) = @_;
  opendir(my $d, $dir) or return 0;
  my $n = grep { !/^\.\.?$/ } readdir $d;
  closedir $d;
  return $n;
}

# This probe runs as a command of envd: its own state directory is there while it runs.
my $state_dirs = count_entries("$state/cmds") - 1;
$state_dirs = 0 if $state_dirs < 0;

my $kinds = join(',', map { my $k = $_; $k =~ s/(["\\])/\\$1/g; "\"$k\":$fds{$_}" } sort keys %fds);
printf('{"rss":%d,"anon":%d,"peakRss":%d,"peakAnon":%d,"lowRss":%d,"lowAnon":%d,"samples":%d,"offset":%d,"cpuBusy":%d,"cpuTotal":%d,'
    . '"fds":{%s},"procs":{"count":%d,"holders":%d,"zombies":%d},"kept":{"stateDirs":%d,"spoolFiles":%d,"cgroups":%d}}' . "\n",
  (map { $_ * 1024 } $rss, $anon, $peak_rss, $peak_anon, $low_rss, $low_anon), $samples, $offset, $cpu_busy, $cpu_total,
  $kinds, $count, $holders, $zombies, $state_dirs, count_files($spool), count_dirs('/sys/fs/cgroup/envd-commands'));
