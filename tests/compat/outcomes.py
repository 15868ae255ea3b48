#!/usr/bin/python3
"""outcomes.py JUNIT.xml -- one line per test, "OUTCOME classname::name", sorted.

OUTCOME is passed, failed, error, skipped or xfailed (pytest records an
expected failure as a skip of type pytest.xfail). make compat compares these
lists between runs without and with clshim, so a test that passes without
clshim and fails with it is named, even when the totals happen to match.
"""
import sys
import xml.etree.ElementTree as ET


def outcome(case):
    for child in case:
        if child.tag == "failure":
            return "failed"
        if child.tag == "error":
            return "error"
        if child.tag == "skipped":
            return "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def main():
    root = ET.parse(sys.argv[1]).getroot()
    lines = ["%s %s::%s" % (outcome(c), c.get("classname", ""), c.get("name", ""))
             for c in root.iter("testcase")]
    lines.sort()
    sys.stdout.write("".join(line + "\n" for line in lines))


if __name__ == "__main__":
    main()
