# Helpers shared by scripts/bench.sh and scripts/bench_analyzer.sh (sourced).

# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# calc EXPRESSION [NAME=VALUE...]: awk arithmetic, printed as awk prints it;
# wrap it in printf for a fixed format. e.g. calc '(a - b) / 2' a=3 b=1
calc() {
  local expr=$1 vars=()
  shift
  for v in "$@"; do vars+=(-v "$v"); done
  awk "${vars[@]}" "BEGIN {print $expr}"
}

# Reads "NAME VALUE..." lines from FILE into the associative array named by
# the first argument (VALUE is the rest of the line).
read_values() {
  local -n into=$1
  local name value
  while read -r name value; do [[ -n $name ]] && into[$name]=$value; done <"$2"
}

# The machine, for a table's heading: cores, CPU model, kernel, date, load.
machine_line() {
  local model
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  echo "$(nproc) cores ($(grep -c '^processor' /proc/cpuinfo) in /proc/cpuinfo), ${model:-unknown CPU}," \
    "Linux $(uname -r) $(uname -m), $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
