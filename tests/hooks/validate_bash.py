#!/usr/bin/env python3
"""PreToolUse hook for Bash: refuse dangerous commands (exit 2: stderr goes to the model)."""

import json
import re
import sys

RULES = [
    (r"\brm\s+-[a-z]*r[a-z]*f|\brm\s+-[a-z]*f[a-z]*r", "Refusing rm -rf: delete files one by one"),
    (r"^grep\b(?!.*\|)", "Use 'rg' instead of 'grep'"),
]

data = json.load(sys.stdin)
if data.get("tool_name") != "Bash":
    sys.exit(0)
command = data.get("tool_input", {}).get("command", "")
problems = [message for pattern, message in RULES if re.search(pattern, command)]
for message in problems:
    print(f"- {message}", file=sys.stderr)
sys.exit(2 if problems else 0)
