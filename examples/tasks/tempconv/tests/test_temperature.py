import unittest

from units.temperature import celsius_to_fahrenheit, fahrenheit_to_celsius


class TemperatureTest(unittest.TestCase):
    def test_to_fahrenheit(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(100), 212)

    def test_freezing_point(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(32), 0)

    def test_boiling_point(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(212), 100)

    def test_round_trip(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(celsius_to_fahrenheit(37.5)), 37.5)


if __name__ == "__main__":
    unittest.main()
