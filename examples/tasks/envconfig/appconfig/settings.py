"""Read `key = value` settings files."""

DEFAULTS = {"port": 8000, "debug": False, "workers": 2}


def load(text):
    """Settings from `text`; keys missing from it keep their DEFAULTS."""
    settings = dict(DEFAULTS)
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        default = DEFAULTS.get(key)
        if isinstance(default, bool):
            settings[key] = bool(value)
        elif isinstance(default, int):
            settings[key] = int(value)
        else:
            settings[key] = value
    return settings
