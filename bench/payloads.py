#!/usr/bin/env python3
"""Writes the benchmark's tasks, `lllm-mock` script and system prompt.

    payloads.py DIR N PAYLOAD TURNS

PAYLOAD `tiny`: 20-byte tasks, one-word system prompt, echo replies.
PAYLOAD `realistic`: tasks of 1-4 KB and replies of 0.5-2 KB with newlines,
quotes, backslashes, tabs and non-ASCII text (deterministic: the same N give
the same bytes). TURNS 1: the model answers at once; TURNS 3: it calls the
built-in `current_time` twice, then answers (three requests per task).

The mock answers by rules, since one server position serves every request:
task i carries the marker `[[reply-K]]` (K = i % 4) and gets the reply of
class K (512, 1024, 1536, 2048 bytes); in the tool loop each tool call's
arguments (`{"step":"1-K"}`) come back in the tool result, whose text picks
the next round's reply.
"""

import json
import random
import sys

LINES = [
    'She said "the build is green" and left; the log said \\"not quite\\".',
    "Path on Windows: C:\\Users\\bench\\data\\input.txt, then C:\\tmp\\out\\",
    "Café au lait, naïve façade, Zürich — 日本語のテキスト, Ελληνικά, emoji 🚀✨",
    "columns\tseparated\tby\ttabs\tlike\ta\tTSV\tfile",
    'A JSON fragment: {"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "Plain prose follows, the kind most prompts are made of: a question about",
    "the quarterly report, with its numbers (12.5 %, 3,400 units, 17 regions),",
    "and a request to summarise it in three sentences for a busy reader.",
    "Regex-looking text: ^\\d{3}-\\d{4}$ and a Markdown `code span` in it.",
    "",
]

SYSTEM_REALISTIC = (
    "You are a careful analyst. Read the task below, which may hold quoted text, "
    "file paths, tables and text in several languages. Answer in plain prose, "
    "keep every number exactly as written, quote the sentences you rely on "
    '("like this"), and say "I don\'t know" when the task does not hold the answer.\n'
    "Never invent sources. Keep the answer under 400 words."
)


def text(rng, size, first):
    """UTF-8 text of about `size` bytes (within one line) starting with `first`."""
    lines, length = [first], len(first.encode())
    while length < size:
        line = rng.choice(LINES)
        lines.append(line)
        length += len(line.encode()) + 1
    return "\n".join(lines)


def main():
    directory, n, payload, turns = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    if payload not in ("tiny", "realistic") or turns not in (1, 3):
        sys.exit("payloads.py: PAYLOAD is tiny or realistic, TURNS 1 or 3")
    rng = random.Random(17)
    classes = range(4)
    with open(f"{directory}/tasks.jsonl", "w", encoding="utf-8") as tasks:
        for i in range(n):
            if payload == "tiny":
                task = f"What is {i} plus one?"
            else:
                task = text(rng, 1024 + rng.randrange(3072), f"Task {i} [[reply-{i % 4}]]:")
            tasks.write(json.dumps({"id": f"t{i}", "task": task}, ensure_ascii=False) + "\n")
    system = "Answer in one word." if payload == "tiny" else SYSTEM_REALISTIC
    with open(f"{directory}/system.txt", "w", encoding="utf-8") as file:
        file.write(system)

    # Tiny replies echo the task (or the tool result); realistic ones are
    # scripted texts of four sizes.
    def answer(k):
        if payload == "tiny":
            return {"echo": True}
        return {"text": text(random.Random(k), 512 * (k + 1) - 40, f"Answer of class {k}:")}

    def marker(k):
        return {} if payload == "tiny" else {"contains": f"[[reply-{k}]]"}

    rules = []
    for k in [0] if payload == "tiny" else classes:
        if turns == 1:
            rules.append({"when": {**marker(k), "last_role": "user"}, "reply": answer(k)})
            continue
        call = lambda step: {"tool_calls": [{"name": "current_time", "arguments": {"step": f"{step}-{k}"}}]}
        rules.append({"when": {**marker(k), "last_role": "user"}, "reply": call(1)})
        rules.append({"when": {"contains": f'"step":"1-{k}"', "last_role": "tool"}, "reply": call(2)})
        rules.append({"when": {"contains": f'"step":"2-{k}"', "last_role": "tool"}, "reply": answer(k)})
    # YAML reads JSON; a request no rule matches is an error the run reports.
    with open(f"{directory}/mock.yaml", "w", encoding="utf-8") as script:
        json.dump({"rules": rules}, script, ensure_ascii=False)


main()
