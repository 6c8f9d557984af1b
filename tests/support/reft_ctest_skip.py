"""pytest plugin for the CTest entries that run pytest (-p reft_ctest_skip): a run in which
every collected test was skipped exits 77, which CTest reports as "skipped" (SKIP_RETURN_CODE),
never as "passed". Each CTest entry selects tests that skip together (a whole file, or a -k
selection), so an entry is either run or skipped; a run that skipped only some of its tests
says so on its last line and stays a pass for the tests that ran."""

SKIP_EXIT = 77


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    passed = len(reporter.stats.get("passed", []))
    skipped = len(reporter.stats.get("skipped", []))
    if skipped and not passed:
        session.exitstatus = SKIP_EXIT


def pytest_terminal_summary(terminalreporter):
    passed = len(terminalreporter.stats.get("passed", []))
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    what = "SKIPPED (every test)" if not passed else f"SOME TESTS SKIPPED ({len(skipped)})"
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        terminalreporter.write_line(f"{what}: {report.nodeid}: {reason}")
