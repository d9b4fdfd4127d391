"""Temperature conversions."""


def celsius_to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32


def fahrenheit_to_celsius(fahrenheit):
    """Degrees Fahrenheit to degrees Celsius."""
    return fahrenheit - 32 * 5 / 9
