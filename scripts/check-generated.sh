#!/usr/bin/env bash
# After `make generate`: fails when a committed BPF object or binding differs
# from what its sources build to. clang-19 emits BTF forward declarations in
# an order that depends on the build directory (the programs are identical),
# so an object that differs only in BTF type numbering is not drift: its
# instructions, sections and its BTF with type ids stripped must match.
set -euo pipefail
drift=()
for f in $(git diff --name-only -- '*.o' '*_bpfel.go'); do
  case $f in
    *.o)
      old=$(mktemp); git show "HEAD:$f" > "$old"
      norm() { bpftool btf dump file "$1" | sed -E 's/^\[[0-9]+\] //; s/(type_id|ret_type_id)=[0-9]+//g' | sort; }
      insns() { llvm-objdump-19 -d --no-show-raw-insn "$1" | tail -n +3; }
      if [ "$(norm "$old")" = "$(norm "$f")" ] && [ "$(insns "$old")" = "$(insns "$f")" ]; then
        git checkout -q -- "$f"   # same object, other BTF order
      else
        drift+=("$f")
      fi
      rm -f "$old";;
    *) drift+=("$f");;
  esac
done
if [ ${#drift[@]} -gt 0 ]; then
  git diff --stat -- "${drift[@]}"
  echo "make: committed BPF objects drift from their sources: run make generate and commit" >&2
  exit 1
fi
