#!/usr/bin/env python3
"""Renders chat-template cases with Python Jinja2 the way Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception and
tojson globals), to cross-check the expected strings in chat_template_test.cc / jinja_test.cc.

Usage: python3 tests/chat/render_reference.py cases.json   (any python3 with Jinja2 3.x)
Each case: {"source" or "file", "messages", "bos", "eos", "add_generation_prompt"}; prints the
cases with "expected" (rendered text) or "error" (exception message) added, as JSON.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(case):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    source = case.get("source")
    if source is None:
        with open(os.path.join(HERE, "templates", case["file"]), encoding="utf-8") as f:
            source = f.read()
    try:
        out = env.from_string(source).render(
            messages=case.get("messages", []), bos_token=case.get("bos", ""), eos_token=case.get("eos", ""),
            add_generation_prompt=case.get("add_generation_prompt", True))
        return dict(case, expected=out)
    except Exception as e:  # noqa: BLE001 - report any template failure
        return dict(case, error=str(e))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
