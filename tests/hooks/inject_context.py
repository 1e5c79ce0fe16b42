#!/usr/bin/env python3
"""UserPromptSubmit hook: add the project's conventions to every prompt; refuse prompts that
carry a password."""

import json
import sys

data = json.load(sys.stdin)
prompt = data.get("prompt", "")
if "password" in prompt.lower():
    print(json.dumps({"decision": "block", "reason": "prompts must not carry passwords"}))
    sys.exit(0)
context = f"Project conventions: tabs, not spaces. (cwd {data['cwd']})"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                         "additionalContext": context}}))
