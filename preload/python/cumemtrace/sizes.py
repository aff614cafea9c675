"""Sizes as `cumemtrace check` reads and writes them (analyzer/common/units.cpp):
"2 GiB", "512MiB", "1.5 g", "0 B", "100" (bytes); KiB/MiB/GiB/TiB/PiB (and
K, M, G, ...) are powers of 1024, KB/MB/GB/TB/PB powers of 1000; case and
blanks do not matter; a fraction must come to a whole number of bytes."""
import re

_UNITS = {"": 1, "b": 1}
for _i, _letter in enumerate("kmgtp", start=1):
    for _name in (_letter, _letter + "i", _letter + "ib"):
        _UNITS[_name] = 1024 ** _i
    _UNITS[_letter + "b"] = 1000 ** _i

_NUMBER = re.compile(r"\s*(\d+\.?\d*|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text):
    """Bytes, or None when `text` is not a size."""
    if not isinstance(text, str):
        return None
    match = _NUMBER.match(text)
    if not match:
        return None
    number, unit = match.groups()
    scale = _UNITS.get(unit.lower())
    if scale is None:
        return None
    whole, _, fraction = number.partition(".")
    digits = int((whole or "0") + fraction)
    scaled = digits * scale
    divisor = 10 ** len(fraction)
    if scaled % divisor != 0 or scaled // divisor >= 1 << 64:
        return None
    return scaled // divisor


def format_size(n):
    """"512 B", "1.50 MiB"; negative sizes (a shrink) with a minus sign."""
    if n < 0:
        return "-" + format_size(-n)
    if n < 1024:
        return "%d B" % n
    value = float(n)
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    unit = 0
    while unit + 1 < len(units) and value >= 1024.0 - 0.005:
        value /= 1024.0
        unit += 1
    return "%.2f %s" % (value, units[unit])
