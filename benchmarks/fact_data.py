"""Hand-made facts and queries for benchmarks/fact_retrieval.py (ours, written for it).

A small company's memory: people, services, deals and decisions, with near-duplicate
distractors on purpose (two Acme customers, billing-api and billing-worker, 48,000 and
84,000, 2025-03-04 and 2025-03-14, Maria Lopez and Mario Lopes). Every fact is one sentence
of a note (its quote); each query names the facts that answer it, by (entity, predicate).
Written before any run and not changed after seeing results.
"""

from __future__ import annotations

# (entity, predicate, value, sentence, valid_from)
Fact = tuple[str, str, str | int, str, str]

# name, role, team, city, manager, started, extension
PEOPLE = [
    ("Maria Lopez", "staff engineer", "payments", "Lisbon", "Priya Raman", "2021-09-01", 4417),
    ("Mario Lopes", "engineering manager", "search", "Porto", "Daniel Okafor", "2022-02-14",
     4471),
    ("Priya Raman", "director of engineering", "platform", "London", "Helen Schulz",
     "2019-05-06", 4100),
    ("Daniel Okafor", "VP of engineering", "platform", "London", "Helen Schulz", "2018-11-12",
     4000),
    ("Helen Schulz", "chief technology officer", "leadership", "Berlin", "the board",
     "2017-03-01", 4001),
    ("Tomasz Nowak", "site reliability engineer", "infrastructure", "Warsaw", "Priya Raman",
     "2023-01-09", 4520),
    ("Aiko Tanaka", "product manager", "payments", "Tokyo", "Grace Mensah", "2022-07-18", 4630),
    ("Grace Mensah", "head of product", "product", "Accra", "Helen Schulz", "2020-04-20", 4600),
    ("Lucas Martin", "account executive", "sales", "Paris", "Sofia Rossi", "2023-06-05", 4811),
    ("Sofia Rossi", "head of sales", "sales", "Milan", "Helen Schulz", "2019-10-01", 4800),
    ("Ahmed Hassan", "account executive", "sales", "Dubai", "Sofia Rossi", "2024-03-11", 4812),
    ("Emma Johansson", "data engineer", "search", "Stockholm", "Mario Lopes", "2024-03-18",
     4472),
]

# name, owning team, language, on-call, p99 target ms, port, datastore
SERVICES = [
    ("billing-api", "payments", "Go", "Maria Lopez", 250, 8443, "PostgreSQL"),
    ("billing-worker", "payments", "Python", "Tomasz Nowak", 2000, 9090, "PostgreSQL"),
    ("search-gateway", "search", "Rust", "Mario Lopes", 120, 7700, "OpenSearch"),
    ("search-indexer", "search", "Python", "Emma Johansson", 5000, 7701, "OpenSearch"),
    ("auth-service", "platform", "Java", "Daniel Okafor", 80, 8080, "Redis"),
    ("notification-hub", "platform", "TypeScript", "Tomasz Nowak", 400, 3000, "RabbitMQ"),
    ("ledger-core", "payments", "Kotlin", "Maria Lopez", 150, 8500, "CockroachDB"),
    ("report-builder", "product", "Python", "Aiko Tanaka", 10000, 8600, "ClickHouse"),
]

# deal, customer, amount EUR, stage, close date, owner
DEALS = [
    ("Acme Corp renewal", "Acme Corp", 48000, "closed won", "2025-03-14", "Lucas Martin"),
    ("Acme Labs expansion", "Acme Labs", 84000, "negotiation", "2025-06-30", "Ahmed Hassan"),
    ("Globex pilot", "Globex", 12500, "closed lost", "2025-02-03", "Lucas Martin"),
    ("Initech platform deal", "Initech", 230000, "proposal", "2025-09-15", "Sofia Rossi"),
    ("Umbrella Health rollout", "Umbrella Health", 156000, "closed won", "2025-01-28",
     "Ahmed Hassan"),
    ("Stark Logistics trial", "Stark Logistics", 9900, "discovery", "2025-08-01",
     "Lucas Martin"),
    ("Wayne Retail upsell", "Wayne Retail", 61000, "closed won", "2025-03-04", "Sofia Rossi"),
    ("Hooli data migration", "Hooli", 310000, "negotiation", "2025-11-20", "Ahmed Hassan"),
    ("Soylent renewal", "Soylent", 27000, "closed lost", "2025-04-22", "Lucas Martin"),
    ("Vandelay Imports onboarding", "Vandelay Imports", 18500, "closed won", "2025-05-09",
     "Ahmed Hassan"),
]

# slug, date, sentence (the decision as written in the meeting notes)
DECISIONS = [
    ("postgres-16", "2025-03-14",
     "On 2025-03-14 the architecture review decided to upgrade billing to PostgreSQL 16."),
    ("drop-mongodb", "2025-03-04",
     "On 2025-03-04 the platform team decided to retire the last MongoDB cluster."),
    ("rust-gateway", "2024-11-05",
     "In November 2024 we chose Rust for the new search gateway instead of Go."),
    ("four-day-freeze", "2024-12-02",
     "Leadership agreed on a code freeze from 20 December to 6 January."),
    ("eu-region", "2025-01-15",
     "We will host all European customer data in the Frankfurt region from 15 January 2025."),
    ("oncall-pay", "2025-02-10",
     "Engineers on call get an extra 300 euros per week of rotation, agreed 10 February 2025."),
    ("kill-legacy-reports", "2025-05-20",
     "The legacy PDF report generator will be switched off at the end of June 2025."),
    ("sso-required", "2024-09-01",
     "Single sign-on is mandatory for every internal tool starting September 2024."),
    ("hiring-freeze", "2025-04-01",
     "Hiring is frozen for all teams except sales until the Q3 2025 planning."),
    ("pricing-tiers", "2025-06-12",
     "Sales moved to three pricing tiers: Starter, Growth and Enterprise (12 June 2025)."),
    ("discount-cap", "2025-06-12",
     "No deal may carry a discount above 25 percent without the head of sales signing off."),
    ("incident-sla", "2024-10-07",
     "A severity one incident must have a public status page update within 15 minutes."),
    ("kotlin-ledger", "2024-08-19",
     "The ledger rewrite will use Kotlin on the JVM, decided 19 August 2024."),
    ("clickhouse-analytics", "2025-02-25",
     "Product analytics moves from Postgres replicas to ClickHouse."),
    ("remote-first", "2023-05-01",
     "The company is remote-first; offices in London and Berlin stay open as hubs."),
    ("retention-90", "2025-07-01",
     "Application logs are kept for 90 days, audit logs for seven years."),
    ("deploy-fridays", "2024-07-15",
     "Production deploys are not allowed on Friday afternoons after 14:00."),
    ("rabbitmq-to-kafka", "2025-08-18",
     "The notification hub will replace RabbitMQ with Kafka by the end of 2025."),
    ("bug-bounty", "2025-09-03",
     "We launch a public bug bounty with a top reward of 10,000 euros."),
    ("offsite-lisbon", "2025-10-08",
     "The engineering offsite in 2026 will be held in Lisbon, not Porto."),
]

PERSON_SENTENCES = {
    "role": "{n} works as {v}.",
    "team": "{n} is on the {v} team.",
    "based_in": "{n} is based in {v}.",
    "reports_to": "{n} reports to {v}.",
    "started_on": "{n} joined the company on {v}.",
    "phone_extension": "{n} can be reached on extension {v}.",
}
SERVICE_SENTENCES = {
    "owned_by": "The {n} service is owned by the {v} team.",
    "language": "{n} is written in {v}.",
    "on_call": "{v} is the primary on-call engineer for {n}.",
    "p99_latency_target_ms": "The p99 latency target of {n} is {v} ms.",
    "port": "{n} listens on port {v}.",
    "datastore": "{n} stores its data in {v}.",
}
DEAL_SENTENCES = {
    "customer": "The {n} is with {v}.",
    "amount_eur": "The {n} is worth {v:,} euros.",
    "stage": "The {n} is at stage {v}.",
    "close_date": "The {n} is expected to close on {v}.",
    "owner": "{v} owns the {n}.",
}


def facts() -> list[Fact]:
    out: list[Fact] = []
    for name, role, team, city, boss, started, ext in PEOPLE:
        values: dict[str, str | int] = {"role": role, "team": team, "based_in": city,
                                        "reports_to": boss, "started_on": started,
                                        "phone_extension": ext}
        for pred, v in values.items():
            out.append((name, pred, v, PERSON_SENTENCES[pred].format(n=name, v=v), started))
    for name, team, lang, oncall, p99, port, store in SERVICES:
        values = {"owned_by": team, "language": lang, "on_call": oncall,
                  "p99_latency_target_ms": p99, "port": port, "datastore": store}
        for pred, v in values.items():
            out.append((name, pred, v, SERVICE_SENTENCES[pred].format(n=name, v=v),
                        "2024-06-01"))
    for name, customer, amount, stage, close, owner in DEALS:
        values = {"customer": customer, "amount_eur": amount, "stage": stage,
                  "close_date": close, "owner": owner}
        for pred, v in values.items():
            out.append((name, pred, v, DEAL_SENTENCES[pred].format(n=name, v=v), "2024-12-01"))
    for slug, date, sentence in DECISIONS:
        out.append((f"decision:{slug}", "decided", sentence, sentence, date))
    return out


# (kind, query, gold [(entity, predicate)])
QUERIES: list[tuple[str, str, list[tuple[str, str]]]] = [
    # by name: the entity is named, the attribute in other or same words
    ("name", "Who does Maria Lopez report to?", [("Maria Lopez", "reports_to")]),
    ("name", "Mario Lopes role", [("Mario Lopes", "role")]),
    ("name", "Where is Tomasz Nowak based?", [("Tomasz Nowak", "based_in")]),
    ("name", "What language is billing-worker written in?", [("billing-worker", "language")]),
    ("name", "search-gateway on-call engineer", [("search-gateway", "on_call")]),
    ("name", "Who owns the Acme Labs expansion?", [("Acme Labs expansion", "owner")]),
    ("name", "Which team is Aiko Tanaka on?", [("Aiko Tanaka", "team")]),
    ("name", "ledger-core datastore", [("ledger-core", "datastore")]),
    ("name", "What stage is the Hooli data migration at?", [("Hooli data migration", "stage")]),
    ("name", "Emma Johansson manager", [("Emma Johansson", "reports_to")]),
    ("name", "Who is the customer of the Globex pilot?", [("Globex pilot", "customer")]),
    ("name", "auth-service port", [("auth-service", "port")]),
    # paraphrase: few or none of the fact's words
    ("paraphrase", "Who is our top technology executive?", [("Helen Schulz", "role")]),
    ("paraphrase", "Which programming language did we pick for the payments ledger rewrite?",
     [("decision:kotlin-ledger", "decided"), ("ledger-core", "language")]),
    ("paraphrase", "Are we allowed to ship to production late on a Friday?",
     [("decision:deploy-fridays", "decided")]),
    ("paraphrase", "How much extra do people get paid for being on call?",
     [("decision:oncall-pay", "decided")]),
    ("paraphrase", "Where is customer data for Europe hosted?",
     [("decision:eu-region", "decided")]),
    ("paraphrase", "How long do we keep application logs?",
     [("decision:retention-90", "decided")]),
    ("paraphrase", "Can we hire new engineers right now?", [("decision:hiring-freeze", "decided")]),
    ("paraphrase", "What is the biggest discount a salesperson can give on their own?",
     [("decision:discount-cap", "decided")]),
    ("paraphrase", "Do employees have to come to the office?",
     [("decision:remote-first", "decided")]),
    ("paraphrase", "Who gets paged when the payment API goes down?",
     [("billing-api", "on_call")]),
    ("paraphrase", "Which message broker does the notification hub move to?",
     [("decision:rabbitmq-to-kafka", "decided")]),
    ("paraphrase", "How quickly must we tell customers about a major outage?",
     [("decision:incident-sla", "decided")]),
    ("paraphrase", "Where will next year's engineering retreat take place?",
     [("decision:offsite-lisbon", "decided")]),
    ("paraphrase", "What database do we use for product analytics?",
     [("decision:clickhouse-analytics", "decided"), ("report-builder", "datastore")]),
    ("paraphrase", "Who leads the sales organisation?", [("Sofia Rossi", "role")]),
    # by number: an amount, port, extension or target is the key
    ("number", "Which deal is worth 84,000 euros?", [("Acme Labs expansion", "amount_eur")]),
    ("number", "Who is on extension 4471?", [("Mario Lopes", "phone_extension")]),
    ("number", "Which service listens on port 7701?", [("search-indexer", "port")]),
    ("number", "Which service has a 120 ms p99 latency target?",
     [("search-gateway", "p99_latency_target_ms")]),
    ("number", "deal worth 230,000 euros", [("Initech platform deal", "amount_eur")]),
    ("number", "What is the top reward of the bug bounty?", [("decision:bug-bounty", "decided")]),
    ("number", "extension 4812", [("Ahmed Hassan", "phone_extension")]),
    ("number", "How much is the Acme Corp renewal worth?", [("Acme Corp renewal", "amount_eur")]),
    ("number", "What runs on port 8443?", [("billing-api", "port")]),
    # by date: a day, month or year names the fact
    ("date", "What did the architecture review decide on 2025-03-14?",
     [("decision:postgres-16", "decided")]),
    ("date", "What did the platform team decide on 2025-03-04?",
     [("decision:drop-mongodb", "decided")]),
    ("date", "Which deal is expected to close on 2025-06-30?",
     [("Acme Labs expansion", "close_date")]),
    ("date", "Who joined the company on 2024-03-18?", [("Emma Johansson", "started_on")]),
    ("date", "Who joined on 2023-01-09?", [("Tomasz Nowak", "started_on")]),
    ("date", "What was decided about the code freeze in December?",
     [("decision:four-day-freeze", "decided")]),
    ("date", "Which deal closes on 2025-11-20?", [("Hooli data migration", "close_date")]),
    ("date", "What changed for internal tools in September 2024?",
     [("decision:sso-required", "decided")]),
    ("date", "What did sales decide on 12 June 2025?",
     [("decision:pricing-tiers", "decided"), ("decision:discount-cap", "decided")]),
]
