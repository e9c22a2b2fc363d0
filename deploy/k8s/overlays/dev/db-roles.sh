#!/bin/sh
# Runs once, when the dev PostgreSQL initialises its data directory (docker-entrypoint-initdb.d): one
# role per service, owning its schema and nothing else, with the password of that service's DATABASE_URL
# (its Secret sats-subscriptions-<service>). Production does the same with CloudNativePG managed roles.
set -eu
for service in gateway billing payments nwc notifier; do
  url=$(printenv "DATABASE_URL_$(echo "$service" | tr a-z A-Z)")
  user=$(echo "$url" | sed -E 's#^[a-z]+://([^:]+):.*$#\1#')
  password=$(echo "$url" | sed -E 's#^[a-z]+://[^:]+:([^@]+)@.*$#\1#')
  psql -v ON_ERROR_STOP=1 --username postgres --dbname "$POSTGRES_DB" \
    -v role="$user" -v password="$password" -v schema="$service" <<'SQL'
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD :'password';
CREATE SCHEMA :"schema" AUTHORIZATION :"role";
SQL
done
