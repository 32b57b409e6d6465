"""`stepstone report`: one self-contained HTML page about a run. Records are untrusted,
so the page escapes them and loads nothing; its timeline shows failed and interrupted
attempts; and in a real browser a person sees every section, bars of a visible width
and the stale step highlighted."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import browser as headless_browser
from browser import chromium
from conftest import run_python
from conftest import stepstone_cli as cli

import stepstone
from stepstone.model.models import Decision, dump, now
from stepstone.present.report.page import html_report
from stepstone.present.report.timeline import axis

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("plan", "timeline", "steps", "decisions", "unknowns", "effects", "commits")
HOSTILE = "<script>alert(1)</script>"


def _reader(workdir: Path, run: str) -> stepstone.Run:
    return stepstone.open_run(run, repo=workdir / ".stepstone", drive=False, create=False)


def _session(workdir: Path, code: int, *args: str) -> None:
    """Run `session.py ARGS` in `workdir` as a new process; it exits with `code`."""
    done = run_python(
        f"import runpy, sys; sys.argv = ['session.py', *{list(args)!r}]; "
        "runpy.run_path('session.py', run_name='__main__')",
        cwd=workdir,
        check=False,
    )
    assert done.returncode == code, done.stderr


def _bars(html: str, kind: str) -> list[float]:
    """The left edges (percent) of the timeline's bars of `kind`, in page order."""
    return [float(x) for x in re.findall(rf'class="bar {kind}" style="left:([0-9.]+)%', html)]


ALLOWED_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "header", "main", "footer", "nav"),
    *("section", "div", "span", "p", "a", "b", "i", "h1", "h2", "h3", "ul", "li", "dl"),
    *("dt", "dd", "table", "tr", "th", "td", "code", "pre"),
}


def _tags(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every start tag of the page with its attributes, as a browser's parser sees them."""
    found: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append((tag, attrs))

    Tags().feed(html)
    return found


def test_the_report_escapes_what_records_say_and_loads_nothing(workdir: Path):
    with stepstone.open_run("hostile") as run:
        run.set_plan(["fetch", "explain"], goal=f"goal {HOSTILE}")
        run.step("fetch", lambda: "x", checks=[f"expr:result != '{HOSTILE}'"])
        run.step("explain", lambda: f"the feed is {HOSTILE}", checks=["note"])
        run.decide("model", "<b>ridge</b>", f"because {HOSTILE}")
        run.decide("model", '"><img src=x onerror=alert(2)>', HOSTILE, revise=True)
        run.unknown('Is it <img src="https://evil.example/x.png">?')
        evil = Decision(key="evil", value=HOSTILE, why=HOSTILE, time=now())
        run.commit_record("decisions/evil.json", dump(evil), f"hand edit {HOSTILE}", [])
    html = html_report(_reader(workdir, "hostile"))

    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert "&lt;b&gt;ridge&lt;/b&gt;" in html  # the revised-from value too
    assert "hand edit &lt;script&gt;" in html  # a commit's subject
    # nothing to load: no link, no source, no URL but the question's, shown as text
    outside = html.replace("https://evil.example/x.png", "")
    assert "http://" not in outside and "https://" not in outside
    tags = _tags(html)
    assert {tag for tag, _ in tags} <= ALLOWED_TAGS
    for tag, attrs in tags:
        for name, value in attrs:
            assert name in (
                "class",
                "style",
                "title",
                "id",
                "href",
                "lang",
                "charset",
                "http-equiv",
                "content",
                "name",
                "colspan",
            ), (tag, name)
            assert name != "href" or (value or "").startswith("#")
            assert "url(" not in (value or "")
    assert "@import" not in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    for section in SECTIONS:
        assert f'<section id="{section}">' in html


def test_the_timeline_shows_failed_and_interrupted_attempts_before_the_confirmed_one(
    workdir: Path,
):
    session = textwrap.dedent(
        """
        import os, pathlib, sys, time, stepstone
        session = int(sys.argv[1])
        def flaky():
            time.sleep(0.05)
            if session == 1:
                raise ValueError("column 'price' has text in row 7")
            pathlib.Path("clean.txt").write_text("ok")
        def slow():
            time.sleep(0.05)
            if session == 2:
                os._exit(9)  # killed in the middle of the step: no record
            pathlib.Path("model.bin").write_text("m")
        with stepstone.open_run("flaky") as run:
            run.step("fetch", lambda: pathlib.Path("raw.txt").write_text("1"),
                     checks=["file:raw.txt"])
            try:
                run.step("clean", flaky, checks=["file:clean.txt"])
            except ValueError:
                sys.exit(1)
            run.step("train", slow, checks=["file:model.bin"])
        """
    )
    (workdir / "session.py").write_text(session)
    for number, code in ((1, 1), (2, 9), (3, 0)):
        _session(workdir, code, str(number))
    (workdir / "model.bin").write_text("changed by hand")  # train is stale now

    html = html_report(_reader(workdir, "flaky"))
    rows = {
        name: html[html.index(f'<span class="name">{name}</span>') :].split("tl-row", 1)[0]
        for name in ("fetch", "clean", "train")
    }
    assert _bars(rows["fetch"], "confirmed") and not _bars(rows["fetch"], "failed")
    (failed,) = _bars(rows["clean"], "failed")
    (confirmed,) = _bars(rows["clean"], "confirmed")
    assert failed < confirmed
    (interrupted,) = _bars(rows["train"], "interrupted")
    (stale,) = _bars(rows["train"], "stale")  # its confirmed attempt, stale now
    assert interrupted < stale
    assert "ValueError: column &#x27;price&#x27; has text in row 7" in html
    assert "1 interrupted" in html and "1 failed" in html
    assert '<tr class="stale">' in html  # the plan's row of the stale step


def test_a_step_that_took_a_renamed_steps_old_name_is_credited_only_its_own_attempts(
    workdir: Path,
):
    from stepstone.present.report.history import read_commits, read_history

    def clean() -> None:
        if not (workdir / "second.txt").exists():
            (workdir / "second.txt").write_text("")
            raise ValueError("the feed was late")

    with stepstone.open_run("names") as run:
        run.set_plan(["clean"])
        with pytest.raises(ValueError):
            run.step("clean", clean)
    with stepstone.open_run("names") as run:
        run.step("clean", clean)  # attempts of clean: failed, confirmed
    with stepstone.open_run("names") as run:
        run.set_plan([{"name": "tidy", "renamed_from": ["clean"]}, "clean"])  # a new clean
        assert run.step("tidy", clean).skipped
        run.step("clean", lambda: None)
    view = _reader(workdir, "names")
    history = read_history(view, *read_commits(view))
    assert [a.status for a in history.attempts_of("tidy")] == ["failed", "confirmed"]
    assert [a.status for a in history.attempts_of("clean")] == ["confirmed"]


@pytest.mark.fault
def test_only_sessions_that_stopped_in_a_step_are_reported_as_interrupted(workdir: Path):
    from stepstone.present.report.history import read_commits, read_history

    session = textwrap.dedent(
        """
        import os, sys, stepstone
        with stepstone.open_run("tidy") as run:  # the steps make the plan
            for name in sys.argv[1].split(","):
                was = "write" if name == "save" else None
                source = sys.argv[2] if name in ("write", "save") else "same"
                with run.stepping(name, source=source, was=was) as attempt:
                    if name == "save" and not attempt.skipped:
                        stepstone.effect(f"post-{sys.argv[2]}", lambda k: {"id": k}, new=True)
                        if sys.argv[2] == "v3":
                            os._exit(9)  # killed after its effect, before its record
        """
    )
    (workdir / "session.py").write_text(session)

    def interrupted() -> list[str]:
        view = _reader(workdir, "tidy")
        history = read_history(view, *read_commits(view))
        return [a.step for a in history.attempts if a.status == "interrupted"]

    for names, source, code in (
        ("load,write,report", "v1", 0),
        ("load,save,report", "v1", 0),
        ("load,save,report", "v2", 0),
        ("load,save,report", "v3", 9),
        ("load,save,report", "v4", 0),
    ):  # all done; renamed; edited; edited and killed in it; edited and done
        _session(workdir, code, names, source)
        if source == "v2":
            assert interrupted() == []
    assert interrupted() == ["save"]  # the session killed after save's effect


def test_a_long_idle_stretch_is_drawn_as_a_narrow_break():
    day = 86_400.0
    found = axis([(0.0, 5.0), (6.0, 9.0), (day, day + 4.0)])
    assert len(found.breaks) == 1
    ((t0, t1, x0, x1),) = found.breaks
    assert (t0, t1) == (9.0, day) and x1 - x0 <= 4.0
    # the busy minutes get the room: a 3-second step is wide, not a sliver
    assert found.x(9.0) - found.x(6.0) > 20
    assert found.x(0.0) == 0.0 and found.x(day + 4.0) == pytest.approx(100.0)


# -- in a real browser ------------------------------------------------------------


def _quickstart_with_a_failure_and_a_stale_step(workdir: Path) -> None:
    """The quickstart run as a person may leave it: its first attempt failed (a file
    stood where its folder goes), the second went through, then its report was edited
    by hand (so step `report` is stale)."""
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    (workdir / "data").write_text("not a folder")
    first = cli("run", "quickstart.ipynb", cwd=workdir)
    assert first.returncode != 0 and "make-data failed" in first.stderr, first.stderr
    (workdir / "data").unlink()
    second = cli("run", "quickstart.ipynb", cwd=workdir)
    assert second.returncode == 0, second.stderr
    report = workdir / "out" / "report.md"
    report.write_text(report.read_text() + "\nedited by hand\n")


@pytest.mark.browser
def test_a_person_sees_the_quickstart_report_in_a_browser(workdir: Path, tmp_path: Path):
    chromium()  # skip early without a browser
    _quickstart_with_a_failure_and_a_stale_step(workdir)
    made = cli("report", "-o", "site/report.html", cwd=workdir)
    assert made.returncode == 0, made.stderr
    page = workdir / "site" / "report.html"
    assert str(Path("site") / "report.html") in made.stdout and page.is_file()

    started = time.monotonic()
    browser = headless_browser("1366,900")  # a laptop's screen
    try:
        browser.get(page.as_uri())
        from selenium.webdriver.common.by import By

        assert browser.title == "stepstone report: quickstart"
        for section in SECTIONS:
            heading = browser.find_element(By.CSS_SELECTOR, f"#{section} h2")
            assert heading.is_displayed() and heading.size["height"] > 0
        text = browser.find_element(By.TAG_NAME, "body").text
        for said in (
            "make-data",
            "threshold",
            "mean of the feed is about 104",
            "Are the prices in EUR or USD?",
            "file:data/prices.csv",
            "n_rows",
            "summary",
            "run quickstart: created",
            "out/report.md changed since it was recorded",
        ):
            assert said in text

        # the timeline: every bar has a visible width; the failed attempt of make-data
        # is a red bar to the left of its confirmed one
        bars = browser.find_elements(By.CSS_SELECTOR, "#timeline .bar")
        assert len(bars) == 4
        for bar in bars:
            assert bar.is_displayed() and bar.size["width"] >= 4 and bar.size["height"] >= 8
        row = browser.find_element(By.CSS_SELECTOR, "#timeline .tl-row:nth-child(2)")
        assert "make-data" in row.text
        failed = row.find_element(By.CSS_SELECTOR, ".bar.failed")
        confirmed = row.find_element(By.CSS_SELECTOR, ".bar.confirmed")
        assert failed.value_of_css_property("background-color") == "rgba(207, 34, 46, 1)"
        assert failed.location["x"] + failed.size["width"] <= confirmed.location["x"]

        # the stale step stands out: its plan row and its timeline row are coloured
        plan_rows = browser.find_elements(By.CSS_SELECTOR, "#plan tr")
        stale = next(r for r in plan_rows if "report" in r.text and "stale" in r.text)
        verified = next(r for r in plan_rows if "summarise" in r.text)
        background = "background-color"
        cell, plain = (
            stale.find_element(By.TAG_NAME, "td"),
            verified.find_element(By.TAG_NAME, "td"),
        )
        assert cell.value_of_css_property(background) != plain.value_of_css_property(background)
        stale_bar = browser.find_element(By.CSS_SELECTOR, "#timeline .tl-row.stale .bar.stale")
        assert stale_bar.size["width"] > 0

        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1366, min(int(height) + 40, 8000))
        shot = tmp_path / "report.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        browser.quit()
    assert time.monotonic() - started < 30
    if os.environ.get("STEPSTONE_SCREENSHOT") == "1":
        shutil.copy(shot, ROOT / "docs" / "report.png")
