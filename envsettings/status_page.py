"""The frame the worker's and the ingest service's status pages share (``GET /`` of each): one
HTML document with no build step and no outside assets, the same look (badges, tables) and the
script's ``$`` helper. Each service's own module supplies its title, body and script.
"""

from __future__ import annotations

STYLE = """\
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2433; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
  .muted { color: #667; }
  .badge { display: inline-block; padding: .1rem .5rem; border-radius: .7rem; color: #fff; }
  .ok { background: #2e7d32; } .wait { background: #b26a00; } .bad { background: #c62828; }
  table { border-collapse: collapse; margin: .8rem 0 1.4rem; }
  th, td { padding: .3rem .7rem; text-align: right; border-bottom: 1px solid #e3e6ee; }
  th:first-child, td:first-child { text-align: left; }
  th { background: #f4f6fa; font-weight: 600; }
"""


def page(title: str, body: str, script: str, style: str = "") -> str:
    """The whole document: ``body`` (HTML) then ``script`` (JavaScript, strict mode, with
    ``$(id)`` for ``document.getElementById``); ``style`` adds CSS rules to the shared ones."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{STYLE}{style}</style>
</head>
<body>
{body}<script>
"use strict";
const $ = (id) => document.getElementById(id);
{script}</script>
</body>
</html>
"""
