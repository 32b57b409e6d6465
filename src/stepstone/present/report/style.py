"""The report's stylesheet, inlined in the page (nothing is loaded from elsewhere)."""

CSS = """
:root {
  --ok: #1a7f37; --ok-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9;
  --warn: #9a6700; --warn-bg: #fff8c5; --stale: #d4a72c; --quiet: #57606a;
  --line: #d0d7de; --soft: #f6f8fa; --ink: #1f2328; --accent: #0969da;
}
* { box-sizing: border-box; }
body {
  margin: 0; color: var(--ink); background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif;
}
main { max-width: 1280px; margin: 0 auto; padding: 0 24px 48px; }
header.top { background: var(--soft); border-bottom: 1px solid var(--line); }
header.top .inner { max-width: 1280px; margin: 0 auto; padding: 18px 24px 12px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 {
  font-size: 17px; margin: 28px 0 10px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line);
}
h3 { font-size: 14px; margin: 0 0 6px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12.5px; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--soft);
  border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px; margin: 4px 0;
  max-height: 14em; overflow: auto; }
nav { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 8px; }
nav a { color: var(--accent); text-decoration: none; }
nav a:hover { text-decoration: underline; }
.goal { font-size: 15px; margin: 2px 0 8px; }
.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px;
  margin: 6px 0; }
.meta dt { color: var(--quiet); }
.meta dd { margin: 0; word-break: break-all; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; margin: 8px 0; }
.next { border-left: 4px solid var(--accent); background: #ddf4ff; padding: 6px 10px;
  border-radius: 0 6px 6px 0; margin: 8px 0; }
.quiet { color: var(--quiet); }
.bad { color: var(--bad); }
.warn { color: var(--warn); }
table { border-collapse: collapse; width: 100%; margin: 4px 0 8px; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px;
  border-bottom: 1px solid var(--line); }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.when { white-space: nowrap; }
td { overflow-wrap: break-word; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px;
  font-weight: 600; line-height: 18px; margin-left: 6px; white-space: nowrap;
  background: #eaeef2; color: var(--quiet); }
td > .badge:first-child { margin-left: 0; }
.badge.verified, .badge.confirmed, .badge.answered, .badge.strong { background: var(--ok-bg);
  color: var(--ok); }
.badge.failed, .badge.unresolved { background: var(--bad-bg); color: var(--bad); }
.badge.open, .badge.submitted, .badge.weak, .badge.planned {
  background: var(--warn-bg); color: var(--warn); }
.badge.stale { background: var(--stale); color: #3d2a00; }
tr.stale > td { background: #fff4d6; }
tr.stale > td:first-child { box-shadow: inset 5px 0 0 var(--stale); }
tr.failed > td:first-child { box-shadow: inset 5px 0 0 var(--bad); }
tr.stale .why { font-weight: 600; color: #7d4e00; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr));
  gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px;
  background: #fff; min-width: 0; }
.card.stale { border-color: var(--stale); box-shadow: inset 5px 0 0 var(--stale);
  background: #fffbeb; }
.card.failed { border-color: var(--bad); box-shadow: inset 5px 0 0 var(--bad); }
.card table { font-size: 13px; }
.card .label { color: var(--quiet); font-size: 12px; text-transform: uppercase;
  letter-spacing: .03em; margin: 8px 0 2px; }
.revised { color: var(--quiet); text-decoration: line-through; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 4px 0 8px;
  color: var(--quiet); font-size: 12.5px; }
.legend span { display: inline-flex; align-items: center; gap: 5px; }
.sw { display: inline-block; width: 18px; height: 10px; border-radius: 2px; }
.timeline { border: 1px solid var(--line); border-radius: 8px; padding: 4px 0 6px;
  overflow: hidden; }
.tl-row { display: grid; grid-template-columns: 230px 1fr 150px; align-items: center;
  min-height: 26px; }
.tl-row:nth-child(even) { background: #fafbfc; }
.tl-row.tl-axis { min-height: 30px; background: #fff; border-bottom: 1px solid var(--line); }
.tl-row.stale { background: #fff4d6; box-shadow: inset 5px 0 0 var(--stale); }
.tl-label { padding: 0 8px 0 12px; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.tl-label .num { color: var(--quiet); display: inline-block; min-width: 1.6em;
  text-align: right; }
.tl-side { padding: 0 10px; font-size: 12px; color: var(--quiet); white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.tl-track { position: relative; height: 26px; margin: 0 8px; }
.tl-axis .tl-track { height: 30px; }
.tick { position: absolute; top: 0; bottom: 0; width: 0; border-left: 1px dashed #e1e4e8; }
.tick-label, .gap-label { position: absolute; bottom: 4px; font-size: 11.5px;
  color: var(--quiet); white-space: nowrap; transform: translateX(-50%); }
.tick-label.start { transform: none; }
.tick-label.end { transform: translateX(-100%); }
.gap-label { top: 2px; bottom: auto; font-style: italic; }
.gap { position: absolute; top: 0; bottom: 0; background: repeating-linear-gradient(
  135deg, #eef0f3 0 4px, #fff 4px 8px); border-left: 1px solid #c9ced4;
  border-right: 1px solid #c9ced4; }
.bar { position: absolute; top: 5px; height: 16px; min-width: 6px; border-radius: 3px; }
.bar.confirmed, .sw.confirmed { background: #2da44e; }
.bar.failed, .sw.failed { background: #cf222e; }
.bar.stale, .sw.stale { background: #d4a72c; outline: 2px dashed #9a6700;
  outline-offset: -2px; }
.bar.interrupted, .sw.interrupted { min-width: 14px; background: repeating-linear-gradient(
  135deg, #fb8f44 0 4px, #ffd8b5 4px 8px); border: 1px solid #bc4c00; }
.sw.gap { background: repeating-linear-gradient(135deg, #dfe3e8 0 3px, #fff 3px 6px);
  border: 1px solid #c9ced4; }
.event, .sw.event { position: absolute; top: 7px; width: 10px; height: 10px;
  margin-left: -5px; background: #8250df; transform: rotate(45deg); }
.sw.event { position: static; margin: 0 4px; width: 9px; height: 9px; }
.tl-row.events .tl-label { color: var(--quiet); font-style: italic; }
footer { color: var(--quiet); font-size: 12px; margin-top: 32px; }
@media (max-width: 900px) {
  .tl-row { grid-template-columns: 150px 1fr 90px; }
  main, header.top .inner { padding-left: 12px; padding-right: 12px; }
}
@media print { nav { display: none; } .timeline { break-inside: avoid; } }
"""
