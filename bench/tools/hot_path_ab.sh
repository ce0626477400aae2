#!/usr/bin/env bash
# Interleaved A/B of the hot_path criterion bench: base binary vs new binary,
# ROUNDS rounds, group hot_path (1024-row batches). Prints ns/row per round.
# usage: bench/tools/hot_path_ab.sh BASE_BIN NEW_BIN [ROUNDS] [FILTER]
base=$1; new=$2; rounds=${3:-3}; filter=${4:-'^hot_path/'}
for r in $(seq 1 "$rounds"); do
  for which in base new; do
    bin=$base; [ $which = new ] && bin=$new
    "$bin" --bench --warm-up-time 1 --measurement-time 4 --noplot "$filter" 2>/dev/null \
      | awk -v w=$which -v r=$r '/^hot_path/ {name=$1} /time:/ {gsub(/\[/,""); for(i=1;i<=NF;i++) if($i=="time:") t=i; v=$(t+3); u=$(t+4); if(u=="µs") v=v*1000; if(u=="ms") v=v*1e6; printf "%s r%d %-32s %8.1f ns/row\n", w, r, name, v/1024}'
  done
done
