#!/usr/bin/env python3
"""Checks that every relative link in the markdown files under experiments/ resolves to a file.

Looks at inline links and images, [text](target) and ![alt](target), outside code spans and
fenced code blocks; URLs (http:, https:, mailto:) and in-page anchors (#...) are skipped, and a
target's own #anchor is dropped before the check. Prints each broken link as FILE:LINE: target
and exits 1 if there is one, 0 otherwise.
Usage: scripts/check_result_links.py [DIR...]   (default: experiments/, from the checkout's root)
"""
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def broken_links(path):
    base = os.path.dirname(path)
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            for match in LINK.finditer(CODE_SPAN.sub("", line)):
                target = match.group(1)
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                target = target.split("#", 1)[0]
                if not os.path.exists(os.path.join(base, target)):
                    yield number, match.group(1)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = sys.argv[1:] or [os.path.join(root, "experiments")]
    bad = files = 0
    for top in dirs:
        for folder, _, names in sorted(os.walk(top)):
            for name in sorted(names):
                if not name.endswith(".md"):
                    continue
                files += 1
                path = os.path.join(folder, name)
                for number, target in broken_links(path):
                    print(f"{os.path.relpath(path)}:{number}: {target}")
                    bad += 1
    print(f"{files} markdown files, {bad} broken links", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
