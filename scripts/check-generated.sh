#!/usr/bin/env bash
# After `make generate`: fails when a committed BPF object or binding differs
# from what its sources build to. Two differences are not drift: clang-19
# emits BTF forward declarations in an order that depends on the build
# directory, and the kernel types an object carries come from vmlinux.h,
# which is dumped from the build machine's kernel (two 6.18 builds differ in
# struct mem_cgroup). So objects are compared by their instructions and
# relocations and by their BTF functions, variables and sections; the Go
# bindings (which carry our own shared types) must match exactly.
set -euo pipefail
drift=()
for f in $(git diff --name-only -- '*.o' '*_bpfel.go'); do
  case $f in
    *.o)
      old=$(mktemp); git show "HEAD:$f" > "$old"
      norm() { bpftool btf dump file "$1" | grep -E '^\[[0-9]+\] (FUNC|VAR|DATASEC) ' | sed -E 's/^\[[0-9]+\] //; s/(type_id|ret_type_id)=[0-9]+//g' | sort; }
      insns() { llvm-objdump-19 -d -r --no-show-raw-insn "$1" | tail -n +3; }
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
