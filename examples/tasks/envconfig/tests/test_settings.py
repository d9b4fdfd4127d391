import unittest

from appconfig.settings import load


class LoadTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(load(""), {"port": 8000, "debug": False, "workers": 2})

    def test_integers(self):
        self.assertEqual(load("port = 9000\n")["port"], 9000)

    def test_debug_true(self):
        self.assertIs(load("debug = true\n")["debug"], True)

    def test_debug_false(self):
        self.assertIs(load("debug = false\n")["debug"], False)

    def test_debug_off(self):
        self.assertIs(load("debug = off  # quiet\n")["debug"], False)


if __name__ == "__main__":
    unittest.main()
