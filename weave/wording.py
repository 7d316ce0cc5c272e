"""Counts in words, for every sentence Weave says to people: "1 attempt", "3 attempts", never "attempt(s)"."""


def plural(n: int, noun: str) -> str:
    """`noun` said of `n` things: "attempt{}" is "attempt" for 1 and "attempts" otherwise ("{}" marks the "s")."""
    return noun.format("" if n == 1 else "s")


def how_many(n: int, noun: str) -> str:
    """ "3 attempts", "1 attempt": `n` and its `noun` (see `plural`)."""
    return f"{n} {plural(n, noun)}"
