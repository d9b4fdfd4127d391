"""Split a list of results into pages."""


def page_count(total, per_page):
    """Number of pages needed to show `total` items, `per_page` on each page."""
    if total <= 0:
        return 0
    return total // per_page


def page(items, number, per_page):
    """Items on page `number` (1-based)."""
    start = (number - 1) * per_page
    return items[start:start + per_page]
