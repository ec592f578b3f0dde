"""Tool for lllm: count the words of `text`. Arguments arrive as JSON on stdin;
the result is printed on stdout."""
import json
import sys

arguments = json.load(sys.stdin)
print(len(str(arguments.get("text", "")).split()))
