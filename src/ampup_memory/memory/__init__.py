"""AmpUp Memory: scopes, episodes, facts and the commit ledger on Apache Iceberg tables."""
