#!/bin/bash
# PostToolUse hook for Write|Edit: strip trailing whitespace from the file just written, the way
# a formatter (prettier, black, gofmt) is run after each edit.
set -euo pipefail
input=$(cat)
file_path=$(printf '%s' "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tool_input"].get("file_path",""))')
if [ -n "$file_path" ] && [ -f "$file_path" ]; then
  sed -i 's/[[:space:]]*$//' "$file_path"
  echo "formatted $file_path"
fi
exit 0
