"""Turn titles into URL slugs."""


def slugify(title):
    """Lower-case `title` and join its words with single dashes."""
    text = title.strip().lower()
    return text.replace(" ", "-")
