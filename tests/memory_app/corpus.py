"""A long, varied conversation for memory tests: several topics that come and
go, with the numbers, names and dates a summary must keep."""

from __future__ import annotations

TOPICS: dict[str, list[tuple[str, str]]] = {
    "kitchen": [
        (
            "I'm renovating my kitchen and the contractor quoted $14,500 for the cabinets.",
            "That is within the usual range for custom cabinets; ask whether installation is included.",
        ),
        (
            "The cabinets will be walnut, and the countertop is quartz from Caesarstone.",
            "Walnut and quartz go well together; seal the walnut near the sink.",
        ),
        (
            "We decided to move the sink under the window, which adds $900 of plumbing.",
            "Moving a sink usually needs a new drain line; $900 sounds reasonable.",
        ),
    ],
    "japan": [
        (
            "My trip to Japan is booked: Tokyo on April 3, then Kyoto for four nights.",
            "Spring is cherry blossom season, so book the Kyoto ryokan early.",
        ),
        (
            "I bought a 14-day JR Pass for 50,000 yen.",
            "The 14-day pass pays off if you also travel to Hiroshima or Kanazawa.",
        ),
        (
            "In Kyoto I want to see Fushimi Inari at sunrise and the moss temple Saiho-ji.",
            "Saiho-ji needs a reservation by postcard or online weeks ahead.",
        ),
    ],
    "running": [
        (
            "I ran my first half marathon in 1:52:10 last Sunday in Lisbon.",
            "Congratulations, that is a strong first half marathon time.",
        ),
        (
            "My coach Marta wants me to try a 10% weekly mileage increase.",
            "The 10% rule is a sensible ceiling; add a down week every fourth week.",
        ),
        (
            "My left knee hurts after long runs over 18 km.",
            "Knee pain after long runs often points to the IT band; see a physio.",
        ),
    ],
    "postgres": [
        (
            "Our Postgres database hit 400 GB and the nightly VACUUM takes three hours.",
            "Consider partitioning the events table by month and tuning autovacuum.",
        ),
        (
            "We switched the events table to monthly partitions on Tuesday.",
            "Partition pruning should now keep most queries on one partition.",
        ),
        (
            "The slow query on orders uses a sequential scan on customer_id.",
            "An index on orders(customer_id, created_at) should turn that into an index scan.",
        ),
    ],
}


def conversation_texts(rounds: int = 5) -> list[tuple[str, str]]:
    """(role, text) pairs: the topics interleaved in blocks, ``rounds`` times,
    with small variations so turns are not identical."""
    turns: list[tuple[str, str]] = []
    for r in range(rounds):
        for name, pairs in TOPICS.items():
            for i, (user, assistant) in enumerate(pairs):
                suffix = f" (round {r + 1}, note {i + 1} on {name})"
                turns.append(("user", user + suffix))
                turns.append(("assistant", assistant + suffix))
    return turns
