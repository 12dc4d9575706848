"""shared.redact: configured secrets never survive, whatever surrounds them, and the text that
leaves is one line of bounded length."""

from __future__ import annotations

from shared.redact import MAX_ERROR_CHARS, REDACTED, Redactor, redact


def test_every_configured_secret_is_scrubbed_longest_first() -> None:
    text = "key sk-abcdef rejected; also sk-abcdef-long and token tok-1234"
    out = redact(text, ["sk-abcdef", "sk-abcdef-long", "tok-1234", None, ""])
    assert out == f"key {REDACTED} rejected; also {REDACTED} and token {REDACTED}"


def test_short_values_are_not_treated_as_secrets() -> None:
    assert redact("a bad request", ["a"]) == "a bad request"


def test_control_characters_collapse_to_one_space() -> None:
    assert redact("line one\r\n\x00line\ttwo\n", []) == "line one line two"


def test_long_text_is_cut_after_scrubbing() -> None:
    secret = "s3cr3t-" + "k" * 40
    text = "x" * (MAX_ERROR_CHARS - 10) + secret + "y" * 1000
    out = redact(text, [secret])
    assert len(out) == MAX_ERROR_CHARS and out.endswith("…")
    assert "s3cr3t" not in out


def test_a_redactor_binds_its_secrets() -> None:
    scrub = Redactor("rk-live-key", None, limit=20)
    assert scrub("HTTP 401: rk-live-key is invalid") == "HTTP 401: [redacted…"
