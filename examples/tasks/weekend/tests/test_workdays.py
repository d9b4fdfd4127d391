import datetime
import unittest

from calendarx.workdays import is_weekend, working_days


class WorkdaysTest(unittest.TestCase):
    def test_friday_is_a_working_day(self):
        self.assertFalse(is_weekend(datetime.date(2024, 3, 8)))

    def test_saturday_is_weekend(self):
        self.assertTrue(is_weekend(datetime.date(2024, 3, 9)))

    def test_sunday_is_weekend(self):
        self.assertTrue(is_weekend(datetime.date(2024, 3, 10)))

    def test_one_full_week(self):
        self.assertEqual(working_days(datetime.date(2024, 3, 4), datetime.date(2024, 3, 10)), 5)


if __name__ == "__main__":
    unittest.main()
