# Local stand-in for the official postgres image, from Debian bookworm's PostgreSQL 15, for
# machines that cannot pull from a registry. Built by infra/images/build-local-base.sh.
# It honours what compose uses of the official image: POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB, PGDATA=/var/lib/postgresql/data, scripts in /docker-entrypoint-initdb.d on the
# first start, pg_isready on PATH. The official compose default is PostgreSQL 17: a data
# directory made by one major version does not open with another.
ARG BASE_IMAGE=toolrl/debian-base:bookworm
FROM ${BASE_IMAGE}
# No "main" cluster from the package's postinst: the entrypoint runs initdb into $PGDATA.
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/toolrl.conf \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15 postgresql-client-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /docker-entrypoint-initdb.d /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
# Plain COPY (the file is 0755 in git): Docker 20.10's classic builder has no --chmod.
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
