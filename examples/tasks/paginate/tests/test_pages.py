import unittest

from pager.pages import page, page_count


class PageCountTest(unittest.TestCase):
    def test_exact_multiple(self):
        self.assertEqual(page_count(20, 10), 2)

    def test_partial_last_page(self):
        self.assertEqual(page_count(21, 10), 3)

    def test_fewer_items_than_a_page(self):
        self.assertEqual(page_count(3, 10), 1)

    def test_empty(self):
        self.assertEqual(page_count(0, 10), 0)


class PageTest(unittest.TestCase):
    def test_last_page_is_short(self):
        self.assertEqual(page(list(range(21)), 3, 10), [20])


if __name__ == "__main__":
    unittest.main()
