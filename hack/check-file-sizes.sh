#!/usr/bin/env bash
# check-file-sizes.sh: two checks of the files git tracks, run by `make verify`.
#
#   1. No tracked file is larger than MAX_FILE_BYTES (1 MiB): build outputs (binaries, images,
#      archives) and downloaded data do not belong in git. Always on.
#   2. No non-generated Go file (zz_generated*.go are generated) has more than MAX_GO_LINES (500)
#      lines. Off by default: it lists the files over the limit and goes on. LINE_LIMIT_STRICT=1
#      makes it fail; switch it on in the Makefile once every file complies.
#
# It reads the work tree's copy of every tracked file, so a file grown since the last commit counts.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

max_bytes=${MAX_FILE_BYTES:-1048576}
max_lines=${MAX_GO_LINES:-500}
strict=${LINE_LIMIT_STRICT:-0}

too_big=()
too_long=()
while IFS= read -r -d '' f; do
	[[ -f $f && ! -L $f ]] || continue # deleted in the work tree, or a symlink
	size=$(wc -c <"$f")
	if ((size > max_bytes)); then
		too_big+=("$f ($size bytes)")
	fi
	if [[ $f == *.go && $(basename "$f") != zz_generated*.go ]]; then
		lines=$(wc -l <"$f")
		if ((lines > max_lines)); then
			too_long+=("$f ($lines lines)")
		fi
	fi
done < <(git ls-files -z)

rc=0
if ((${#too_big[@]} > 0)); then
	echo "tracked files larger than $max_bytes bytes (remove them with 'git rm --cached' and add them to .gitignore):"
	printf '  %s\n' "${too_big[@]}"
	rc=1
fi
if ((${#too_long[@]} > 0)); then
	if [[ $strict == 1 ]]; then
		echo "Go files longer than $max_lines lines (split them by topic):"
		rc=1
	else
		echo "Go files longer than $max_lines lines (split them by topic; LINE_LIMIT_STRICT=1 makes this fail):"
	fi
	printf '  %s\n' "${too_long[@]}"
fi
exit $rc
