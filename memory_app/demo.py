"""The demo conversation: a deterministic, multi-topic chat of any length.

``demo_messages(count)`` returns ``count`` user messages of one long
conversation with a personal assistant, interleaving the topics below in
sessions a day or a few apart. The first message of each session opens with a
session date header (``[2026/09/01 (Tue) 08:30]``), which the memory reads as
the session date. Each topic is a story told in order: concrete names, sums and
dates, some of which change later (the kitchen budget goes up, the party moves
indoors), so summaries and recall have something to keep. Later sessions ask
about earlier facts, often from another topic than the one at hand. When the
stories are told, sessions keep going with questions and recaps, so any length
can be asked for. The same ``count`` and ``seed`` always give the same messages.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

START = dt.datetime(2026, 9, 1, 8, 30)


@dataclass(frozen=True)
class DemoTopic:
    name: str
    beats: tuple[str, ...]  # the story, in order
    questions: tuple[tuple[int, str], ...]  # (beats told before it may be asked, question)


TOPICS: tuple[DemoTopic, ...] = (
    DemoTopic(
        "kitchen renovation",
        (
            "We're finally renovating the kitchen. Our kitchen contractor is Marco Bellini from Bellini & Sons, and the budget we agreed on is $28,000.",
            "Marco wants walnut cabinets with a quartz countertop. The quartz alone is $4,200 for 38 square feet.",
            "We decided to move the sink under the window. That adds $900 of plumbing work.",
            "Kitchen demolition is scheduled for Monday, September 28, and Marco says the whole job takes six weeks.",
            "The city permit came through: permit number B-2026-4471, and the rough-in inspection is booked for October 5.",
            "For the backsplash I picked white zellige tiles from Heath Ceramics, about $23 per square foot.",
            "We're buying a Bosch induction cooktop, model PIV875N17E, for $2,350.",
            "Bad news: the walnut price went up, so Marco says the new kitchen budget is $34,500 instead of $28,000.",
            "The quartz fabricator in Fremont delayed the countertops by two weeks, so they now arrive on October 20.",
            "We're living on a microwave and a hot plate in the garage until the countertops go in.",
            "The electrician, Tanya Ruiz, added four recessed lights and a 240-volt line for the cooktop, $1,150 in total.",
            "Cabinet installation finished today. The soft-close hinges are Blum, and they feel great.",
            "The final inspection passed today. Marco's last invoice is $6,800.",
            "All in, the kitchen came to $35,900, so we went $1,400 over the new budget.",
        ),
        (
            (1, "Who is our kitchen contractor again?"),
            (4, "When does the kitchen demolition start?"),
            (8, "What is the kitchen budget now, after the walnut price went up?"),
            (9, "When do the quartz countertops arrive?"),
            (13, "How much did the electrician charge for the lights and the cooktop line?"),
        ),
    ),
    DemoTopic(
        "trip to Japan",
        (
            "I'm planning a trip to Japan next spring with my sister Emma: 12 nights, leaving San Francisco on March 14, 2027.",
            "Our airline is JAL: tickets from SFO to Haneda are booked, $1,340 each, seats 32A and 32B.",
            "In Tokyo we're staying five nights at the Hotel Gracery in Shinjuku.",
            "Emma insists on a day trip to Nikko to see the Toshogu shrine.",
            "Then four nights in Kyoto at a small ryokan near Gion called Yoshida-sanso.",
            "The JR Passes cost 80,000 yen each: we ordered 14-day passes for both of us.",
            "The airline moved our flight: we now leave on March 16, 2027, so the trip starts two days later.",
            "We're adding a day trip from Kyoto to Hiroshima and Miyajima on the Shinkansen.",
            "The last three nights are in Osaka, where we meet Emma's friend Kenji Watanabe.",
            "We booked a tea ceremony in Uji for March 23 at 2 pm, 6,500 yen per person.",
            "My budget for the whole trip is $5,500 including flights.",
            "Emma is vegetarian, so I'm collecting shojin ryori restaurants in Kyoto.",
            "We got a pocket wifi from Ninja WiFi for the whole trip, pickup at Haneda terminal 3.",
        ),
        (
            (2, "Which airline did we book to Japan, and how much were the tickets?"),
            (6, "How much did the JR Passes cost?"),
            (7, "When do we leave for Japan now that the airline moved the flight?"),
            (9, "Who are we meeting in Osaka?"),
            (11, "What's my total budget for the Japan trip?"),
        ),
    ),
    DemoTopic(
        "marathon training",
        (
            "I signed up for the Valencia Marathon on December 6, 2026. My goal is to finish under 3:45.",
            "My coach is Priya Raman. She put me on an 18-week plan with four runs a week.",
            "This week's long run was 24 km at 6:05 per km, and it felt easy.",
            "Priya wants my tempo runs at 5:05 per km, 8 km at a time on Thursdays.",
            "I bought Saucony Endorphin Speed 4 shoes for training, $170.",
            "My left knee hurt after the 28 km run, so Priya cut this week's mileage to 40 km.",
            "The physio, Mateo Alvarez, says my knee has IT band tightness, nothing torn. Foam rolling every night.",
            "Good news: I ran a 10K race in 47:12, a personal best by almost two minutes.",
            "Priya thinks my marathon goal time can be 3:35 now instead of 3:45.",
            "The longest run of the plan is 32 km on November 15, then the taper starts.",
            "Race-day fuel: one gel every 7 km, Maurten 100, and water at every station.",
            "My bib number for Valencia is 18342, and I start in wave 3 at 8:45.",
            "I booked a hotel in Valencia near the City of Arts and Sciences for three nights, 420 euros.",
        ),
        (
            (1, "When is the Valencia Marathon?"),
            (4, "What pace did Priya set for my tempo runs?"),
            (7, "What did the physio say about my knee?"),
            (9, "What's my marathon goal time now?"),
            (10, "When is my longest training run?"),
        ),
    ),
    DemoTopic(
        "job search",
        (
            "I've started looking for a new job as a senior data engineer. I want to stay under a 30-minute commute or go fully remote.",
            "I applied to Northwind Analytics, Fabrikam and Contoso Health this week.",
            "The recruiter at Northwind is Dana Okafor. The phone screen is on Thursday, September 24, at 10 am.",
            "Northwind's take-home assignment is a streaming pipeline in Kafka and dbt, due within 72 hours.",
            "Fabrikam turned me down after the first round; they wanted someone with more Scala.",
            "The onsite at Northwind went well. I met the VP of data, Luis Ferreira, and the team of six engineers.",
            "Northwind's first offer: $142,000 base, a 10% bonus and 0.05% equity.",
            "Contoso Health offered $148,000 base and fully remote work, but no equity.",
            "I negotiated with Dana, and Northwind raised the base to $151,000 with the same bonus.",
            "I accepted the Northwind offer, and I start the new job on Monday, January 11, 2027.",
            "I gave notice at my current job; my last day is December 18.",
            "My manager at Northwind will be Aisha Karimi, and the first project is the billing data warehouse.",
        ),
        (
            (3, "Who is my recruiter at Northwind?"),
            (7, "What was Northwind's first offer?"),
            (9, "What base salary did I negotiate at Northwind in the end?"),
            (10, "When do I start the new job?"),
            (12, "Who will my manager be at Northwind?"),
        ),
    ),
    DemoTopic(
        "data pipeline bug",
        (
            "At work our nightly orders pipeline in Airflow started producing duplicate rows in the orders_daily table.",
            "It happens about 3% of the time, and only for orders placed between midnight and 2 am UTC.",
            "The job reads 3.2 million rows a night from the S3 bucket acme-orders-raw and writes Parquet.",
            "I think it's a timezone bug: pandas to_datetime parses the timestamps as naive, and the partition filter uses local time.",
            "Confirmed: two consecutive daily partitions both contain the orders from 00:00 to 02:00 UTC.",
            "The fix for the duplicate orders bug is utc=True in to_datetime plus a dedup on order_id and updated_at before the write.",
            "I added a test with orders at 23:59 and 00:01 UTC around a daylight saving change, and it passes now.",
            "The backfill over the last 90 days removed 41,733 duplicate rows.",
            "While I was at it, I partitioned the table by order date, and the nightly run dropped from 47 minutes to 18 minutes.",
            "The finance team confirmed their revenue dashboard now matches the ledger to the cent.",
            "Next step is a data quality check in Great Expectations that fails the DAG if order_id is ever duplicated.",
            "Our team lead, Oskar Nilsson, wants a short postmortem by Friday.",
        ),
        (
            (3, "Which S3 bucket does the orders pipeline read from?"),
            (6, "What was the fix for the duplicate orders bug?"),
            (8, "How many duplicate rows did the backfill remove?"),
            (9, "How long does the nightly pipeline take now?"),
        ),
    ),
    DemoTopic(
        "birthday party",
        (
            "My daughter Maya turns 8 on Saturday, November 21, and we're throwing a party for her.",
            "She wants a dinosaur theme, and we're inviting 14 kids from her class.",
            "The plan is to have the party in our backyard from 2 to 5 pm.",
            "I ordered a triceratops cake from Rosie's Bakery, chocolate with raspberry filling, $65.",
            "The party budget is $400 including the cake, food and goodie bags.",
            "We hired a paleontology show, Dino Dan's Fossil Dig, for 45 minutes, $180.",
            "Late November is often rainy here, so Maya's party now takes place at the community center on Elm Street instead of our backyard.",
            "The community center room costs $75 for the afternoon and has tables for 20.",
            "Goodie bags: dinosaur stickers, a mini excavation kit and a bouncy ball, about $6 per bag.",
            "Maya's best friend Sofia has a nut allergy, so the cake and the snacks must be nut-free.",
            "Twelve of the 14 kids said yes. Grandma Ruth is coming too and will take photos.",
            "Maya made the invitations herself, with a T. rex on each one, and handed them out on Monday.",
        ),
        (
            (2, "How many kids are invited to Maya's party?"),
            (4, "Where did I order the birthday cake from, and what kind is it?"),
            (7, "Where is Maya's party taking place now?"),
            (10, "Which of Maya's friends has a nut allergy?"),
        ),
    ),
    DemoTopic(
        "dog adoption",
        (
            "We're adopting a retired racing greyhound named Biscuit from Greyhound Friends in Hopkinton; he's 4 years old.",
            "The adoption fee is $350, which includes his vaccinations and the microchip.",
            "Biscuit comes home on Saturday, October 3. We need a crate, a martingale collar and a raised bowl.",
            "Biscuit's vet is Hanna Lindqvist at Maple Street Animal Clinic; the first checkup is October 9.",
            "Biscuit weighs 31 kg and eats 2 cups of kibble twice a day.",
            "He's scared of the stairs, so we're practicing with treats, one step a day.",
            "The dog walker, Jamal, comes at noon on weekdays for $22 a walk.",
            "The microchip number is 985112003456789, registered with HomeAgain.",
            "Biscuit finally climbed the stairs by himself after two weeks of practice.",
            "Hanna Lindqvist says his teeth need a cleaning in the spring, about $600.",
        ),
        (
            (1, "What's the name of the greyhound we're adopting?"),
            (4, "Who is Biscuit's vet?"),
            (5, "How much does Biscuit eat?"),
            (7, "How much does the dog walker charge?"),
        ),
    ),
)

# Filler words only, like the simulator's replies: no topic of their own.
ACKS = (
    "Okay, let's go with that.",
    "Perfect, thank you!",
    "Sounds good.",
    "Great, I'll do that.",
    "Got it, thanks.",
    "Thanks!",
)


def demo_messages(count: int, *, seed: int = 8) -> list[str]:
    """``count`` user messages of the demo conversation (see the module docstring)."""
    rng = random.Random(seed)
    told = dict.fromkeys(range(len(TOPICS)), 0)
    asked: set[tuple[int, int]] = set()
    when = START
    messages: list[str] = []
    while len(messages) < count:
        session = _session(rng, told, asked)
        session[0] = f"[{when:%Y/%m/%d (%a) %H:%M}] {session[0]}"
        messages += session
        when = _next_session(rng, when)
    return messages[:count]


def _session(rng: random.Random, told: dict[int, int], asked: set[tuple[int, int]]) -> list[str]:
    """One sitting: the next beats of one or two topics, with a question or an
    acknowledgement here and there; recaps and questions once the stories are told."""
    open_topics = [t for t in told if told[t] < len(TOPICS[t].beats)]
    if not open_topics:
        return _late_session(rng)
    question = _question(rng, told, asked)  # about what earlier sessions told
    # The stories least far along go first, so they all unfold over the same weeks
    # and the dates they mention stay plausible.
    open_topics.sort(key=lambda t: told[t] / len(TOPICS[t].beats) + rng.random() * 0.2)
    session: list[str] = []
    for n, topic in enumerate(open_topics[: rng.choice((1, 1, 2))]):
        beats = TOPICS[topic].beats
        take = rng.randint(2, 4)
        opening = ["By the way: " if n else ""]
        session += [
            p + b
            for p, b in zip(
                opening + [""] * take, beats[told[topic] : told[topic] + take], strict=False
            )
        ]
        told[topic] = min(len(beats), told[topic] + take)
        if rng.random() < 0.35:
            session.append(rng.choice(ACKS))
    if question and rng.random() < 0.6:
        session.insert(rng.randint(1, len(session)), question)
    return session


def _question(rng: random.Random, told: dict[int, int], asked: set[tuple[int, int]]) -> str:
    """A question not asked yet about something already told, if there is one."""
    ready = [
        (topic, i)
        for topic in told
        for i, (needs, _) in enumerate(TOPICS[topic].questions)
        if told[topic] >= needs and (topic, i) not in asked
    ]
    if not ready:
        return ""
    topic, i = rng.choice(ready)
    asked.add((topic, i))
    return TOPICS[topic].questions[i][1]


def _late_session(rng: random.Random) -> list[str]:
    topic = rng.choice(TOPICS)
    (_, first), (_, second) = rng.sample(
        [q for t in TOPICS for q in t.questions if t is not topic], 2
    )
    _, own = rng.choice(topic.questions)
    beat = rng.choice(topic.beats)
    return [
        f"Let me go over the {topic.name} again. {beat}",
        own,
        first,
        rng.choice(ACKS),
        second,
    ]


def _next_session(rng: random.Random, when: dt.datetime) -> dt.datetime:
    day = (when + dt.timedelta(days=rng.choice((1, 1, 2, 3)))).date()
    return dt.datetime.combine(day, dt.time(rng.randint(7, 21), rng.choice((5, 14, 30, 42, 55))))
