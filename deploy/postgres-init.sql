-- Run once by the postgres image on an empty data folder (docker-entrypoint-initdb.d).
-- ampup_cells is POSTGRES_DB; the catalog and the index get their own databases.
CREATE DATABASE ampup_catalog OWNER ampup;
CREATE DATABASE ampup_index OWNER ampup;
\connect ampup_cells
CREATE EXTENSION IF NOT EXISTS vector;
\connect ampup_index
CREATE EXTENSION IF NOT EXISTS vector;
