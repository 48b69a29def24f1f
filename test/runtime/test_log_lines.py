"""Bounded log lines (issue 12: 7,405 refused requests wrote 364 MB of log)."""

from amf_ros.runtime.log_lines import MAX_CHARS, ErrorThrottle, bounded


def test_bounded_quotes_the_head_says_the_size_and_escapes_control_characters():
    assert bounded("push") == "push"
    huge = "x" * 100_000
    line = bounded(f"unknown task(s) ['{huge}']")
    assert len(line) < MAX_CHARS + 40 and line.endswith("(100020 characters in all)")
    assert bounded("push\x00x") == "push\\x00x" and "\n" not in bounded("a\nb")


def test_throttle_one_line_per_period_with_the_count_of_the_suppressed():
    th = ErrorThrottle(1.0)
    lines = [th.line(("next_task", "refused"), "refused", now=t / 100) for t in range(250)]
    kept = [x for x in lines if x is not None]
    assert kept == ["refused", "refused (99 similar messages not logged)", "refused (99 similar messages not logged)"]
