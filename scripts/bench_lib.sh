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

# The one table: table_row adds a row (its command becomes a numbered
# footnote; an identical command reuses its number), print_table prints the
# rows as a Markdown table with aligned columns, then the footnotes.
table_rows=() table_notes=()
table_row() {  # MEASUREMENT BASELINE CUMEMTRACE RESULT GOAL COMMAND
  local n i
  for i in "${!table_notes[@]}"; do [[ ${table_notes[i]} == "$6" ]] && n=$((i + 1)); done
  if [[ -z ${n:-} ]]; then
    table_notes+=("$6")
    n=${#table_notes[@]}
  fi
  table_rows+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4"$'\t'"$5"$'\t'"[$n]")
}
print_table() {
  {
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' measurement baseline cumemtrace result goal command
    printf '%s\n' "${table_rows[@]}"
  } | awk -F'\t' '
    { for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
    END {
      for (r = 1; r <= NR; r++) {
        line = "|"
        for (i = 1; i <= 6; i++) line = line sprintf(" %-*s |", w[i], cell[r, i])
        print line
        if (r == 1) {
          line = "|"
          for (i = 1; i <= 6; i++) { dashes = ""; for (k = 0; k < w[i] + 2; k++) dashes = dashes "-"; line = line dashes "|" }
          print line
        }
      }
    }'
  echo
  local i
  for i in "${!table_notes[@]}"; do echo "[$((i + 1))] ${table_notes[i]}"; done
}
