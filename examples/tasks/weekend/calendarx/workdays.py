"""Working days."""

import datetime


def is_weekend(day):
    """True for Saturday and Sunday."""
    return day.weekday() > 5


def working_days(start, end):
    """Working days from `start` to `end`, both included."""
    count = 0
    day = start
    while day <= end:
        if not is_weekend(day):
            count += 1
        day += datetime.timedelta(days=1)
    return count
