-- Failed authentication attempts of every kind (issue 9): `login` (subject: the email) and
-- `otp` (subject: the user id). A row is written before the work it guards and removed when
-- that work succeeds, so parallel attempts are all counted.
CREATE TABLE auth_failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    client TEXT NOT NULL,   -- an IPv4 address or an IPv6 /64
    at INTEGER NOT NULL     -- seconds
);
CREATE INDEX auth_failures_subject ON auth_failures(kind, subject, at);
CREATE INDEX auth_failures_client ON auth_failures(kind, client, at);

-- Where each user last logged in successfully: exempt from the per-email delay.
CREATE TABLE login_clients (
    subject TEXT NOT NULL,
    client TEXT NOT NULL,
    at INTEGER NOT NULL,    -- seconds
    PRIMARY KEY (subject, client)
);

DROP TABLE login_failures;
