"""Parse durations such as "1h30m" or "45s" into seconds."""

import re

_PART = re.compile(r"(\d+)([hms])")
_SECONDS = {"h": 3600, "m": 3600, "s": 1}


def parse_duration(text):
    """Seconds in `text`, a sequence of <number><unit> parts with units h, m and s."""
    text = text.strip().lower()
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * _SECONDS[unit] for number, unit in parts)
