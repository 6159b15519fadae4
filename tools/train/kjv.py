"""kjv.py: the training text, the King James Bible from Debian's bible-kjv-text package.

The package stores the text compressed (/usr/lib/bible.data); the `bible` program from the
bible-kjv package prints it. Each chapter becomes one document: its verses joined by single
spaces, without verse numbers, so the model learns running prose rather than references.
The last two books (Jude, Revelation: about 2.3% of the text) are held out for validation.
"""

import re
import shutil
import subprocess

VALIDATION_BOOKS = ("Jude", "Revelation")


def read_bible_text():
    """Returns the whole text as printed by `bible`, one verse per line."""
    exe = shutil.which("bible")
    if exe is None:
        raise SystemExit("the `bible` program is missing: apt-get install bible-kjv bible-kjv-text")
    # -l100000: no line wrapping, so every verse is a single line.
    out = subprocess.run([exe, "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    return out


def parse_chapters(raw):
    """Returns [(book, chapter number, text)] in canonical order."""
    chapters = []
    book, number, verses = None, None, []
    header = re.compile(r"^(\S.*) (\d+)$")
    verse = re.compile(r"^\s+\d+ (.*)$")
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = header.match(line)
        if m:
            if book is not None:
                chapters.append((book, number, " ".join(verses)))
            book, number, verses = m.group(1), int(m.group(2)), []
            continue
        m = verse.match(line)
        if m is None:
            raise ValueError("unexpected line in bible output: %r" % line)
        verses.append(" ".join(m.group(1).split()))
    if book is not None:
        chapters.append((book, number, " ".join(verses)))
    return chapters


def split_documents():
    """Returns (train documents, validation documents): lists of chapter texts."""
    chapters = parse_chapters(read_bible_text())
    train = [t for b, _, t in chapters if b not in VALIDATION_BOOKS]
    val = [t for b, _, t in chapters if b in VALIDATION_BOOKS]
    if len(chapters) != 1189 or not val:
        raise ValueError("expected the 1189 chapters of the KJV, got %d" % len(chapters))
    return train, val
