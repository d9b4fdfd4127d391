import unittest

from textutil.slug import slugify


class SlugifyTest(unittest.TestCase):
    def test_single_spaces(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_runs_of_spaces_collapse(self):
        self.assertEqual(slugify("Hello  World"), "hello-world")

    def test_surrounding_spaces(self):
        self.assertEqual(slugify("  Hello   big World "), "hello-big-world")


if __name__ == "__main__":
    unittest.main()
