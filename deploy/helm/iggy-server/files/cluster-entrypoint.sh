#!/bin/sh
# The container command of a StatefulSet pod in cluster mode (cluster.enabled in values.yaml).
# It writes the roster, one [[cluster.nodes]] entry per pod, each named by its stable DNS name
# through the headless Service (<statefulset>-<i>.<headless>.<namespace>.svc.<domain>, which
# resolves before the pod is ready: the Service publishes not-ready addresses), then runs the
# server as the replica whose id is this pod's ordinal, the suffix of its host name.
# The same bytes run in conformance/tests/e2e/helm.rs, in network namespaces standing for pods.
set -eu

: "${ROSTER_STATEFULSET:?the StatefulSet's name}"
: "${ROSTER_HEADLESS_SERVICE:?the headless Service's name}"
: "${ROSTER_NAMESPACE:?the pod's namespace}"
: "${ROSTER_REPLICAS:?the number of pods}"
domain="${ROSTER_CLUSTER_DOMAIN:-cluster.local}"
replica_port="${ROSTER_REPLICA_PORT:-8100}"
config="${IGGY_CONFIG_PATH:-/var/lib/iggy/cluster.toml}"

# A StatefulSet pod's host name is <statefulset>-<ordinal>.
host="${HOSTNAME:?}"
ordinal="${host##*-}"
case "$ordinal" in
    '' | *[!0-9]*)
        echo "cluster-entrypoint: host name $host does not end in a pod ordinal" >&2
        exit 1
        ;;
esac
if [ "$host" != "$ROSTER_STATEFULSET-$ordinal" ]; then
    echo "cluster-entrypoint: host name $host is not a pod of StatefulSet $ROSTER_STATEFULSET" >&2
    exit 1
fi
if [ "$ordinal" -ge "$ROSTER_REPLICAS" ]; then
    echo "cluster-entrypoint: pod $host is beyond the $ROSTER_REPLICAS replicas of the roster" >&2
    exit 1
fi

# cluster.advertisedAddresses: what clients outside the Kubernetes cluster reach each pod at,
# one word per pod in ordinal order (checked by the server as an IP or host name).
advertised="${ROSTER_ADVERTISED_ADDRESSES:-}"
word_count() { echo "$#"; }
# The word of $advertised at index $1 (from 0).
advertised_address() {
    n="$1"
    # shellcheck disable=SC2086 # one word per pod
    set -- $advertised
    shift "$n"
    echo "$1"
}
# shellcheck disable=SC2086 # one word per pod
if [ -n "$advertised" ] && [ "$(word_count $advertised)" -ne "$ROSTER_REPLICAS" ]; then
    echo "cluster-entrypoint: ROSTER_ADVERTISED_ADDRESSES names $(word_count $advertised) addresses for $ROSTER_REPLICAS replicas" >&2
    exit 1
fi

# The ports are the image's listeners (Dockerfile ENV), the same in every pod.
{
    echo "# Written by cluster-entrypoint.sh for pod $host; the same on every pod."
    i=0
    while [ "$i" -lt "$ROSTER_REPLICAS" ]; do
        printf '\n[[cluster.nodes]]\nname = "%s-%s"\n' "$ROSTER_STATEFULSET" "$i"
        printf 'ip = "%s-%s.%s.%s.svc.%s"\n' \
            "$ROSTER_STATEFULSET" "$i" "$ROSTER_HEADLESS_SERVICE" "$ROSTER_NAMESPACE" "$domain"
        printf 'replica_id = %s\n' "$i"
        if [ -n "$advertised" ]; then
            printf 'advertised_address = "%s"\n' "$(advertised_address "$i")"
        fi
        printf '[cluster.nodes.ports]\n'
        printf 'tcp = 8090\nquic = 8080\nhttp = 3000\nwebsocket = 8092\ntcp_replica = %s\n' \
            "$replica_port"
        i=$((i + 1))
    done
} >"$config.tmp"
mv "$config.tmp" "$config"

export IGGY_CONFIG_PATH="$config"
exec iggy-server --replica-id "$ordinal" "$@"
