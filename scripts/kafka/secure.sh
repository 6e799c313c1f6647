# shellcheck shell=bash
# The secured variant of the local broker (KAFKA_SECURITY=sasl_ssl), sourced by
# scripts/kafka-local.sh: a TLS listener with SASL/SCRAM-SHA-512 on $KAFKA_PORT, SCRAM users
# created at format time, and the StandardAuthorizer denying everything no ACL allows.
#
# Made once per data dir (kept until `wipe`):
#   tls/ca.pem, tls/ca.key        a throwaway CA (clients: KAFKA_SSL_CAFILE=<data>/tls/ca.pem)
#   tls/broker.p12                the broker's key and certificate (CN and SAN 127.0.0.1, localhost)
#   secrets/<user>.password       one random password per SCRAM user (KAFKA_SASL_PASSWORD_FILE)
#   admin.properties              Java client configs of the super user (kafka tools' --command-config)
#
# Users: admin (super user; the broker itself), dedupe-worker, dedupe-ingest, dedupe-spark.
# Each component's ACLs: `make kafka-acls` (python -m scripts.kafka_acls, docs/security.md).
#
# The controller listener stays PLAINTEXT on 127.0.0.1 and its principal (User:ANONYMOUS) is a
# super user, which the broker's own controller requests need. Fine for a throwaway local broker
# that only this machine reaches; on a real cluster secure the controller listener too.

SECURE_USERS=(admin dedupe-worker dedupe-ingest dedupe-spark)
TLS_DIR="$DATA_DIR/tls"
SECRETS_DIR="$DATA_DIR/secrets"
ADMIN_PROPS="$DATA_DIR/admin.properties"

secure_password() { # the password of SCRAM user $1
  cat "$SECRETS_DIR/$1.password"
}

# The CA, the broker's certificate and the users' passwords, made once per data dir.
secure_init() {
  command -v openssl >/dev/null || die "openssl is needed for KAFKA_SECURITY=sasl_ssl"
  mkdir -p "$TLS_DIR" "$SECRETS_DIR"
  chmod 700 "$SECRETS_DIR" "$TLS_DIR"
  local user
  for user in "${SECURE_USERS[@]}"; do
    [[ -s $SECRETS_DIR/$user.password ]] && continue
    (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$SECRETS_DIR/$user.password")
  done
  [[ -s $SECRETS_DIR/keystore.password ]] ||
    (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$SECRETS_DIR/keystore.password")
  if [[ ! -s $TLS_DIR/broker.p12 ]]; then
    say "making a throwaway CA and broker certificate in $TLS_DIR"
    (
      cd "$TLS_DIR"
      umask 077
      openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=kafka-local CA" \
        -keyout ca.key -out ca.pem -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
      openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout broker.key -out broker.csr
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >broker.ext
      openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
        -extfile broker.ext -out broker.pem
      openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
        -out broker.p12 -passout "file:$SECRETS_DIR/keystore.password"
      rm -f broker.csr broker.ext broker.key ca.srl
      chmod 644 ca.pem
    ) >"$DATA_DIR/tls.log" 2>&1 || {
      cat "$DATA_DIR/tls.log" >&2
      die "making the TLS certificates failed"
    }
  fi
  local jaas
  jaas="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$(secure_password admin)\";"
  (
    umask 077
    {
      echo "security.protocol=SASL_SSL"
      echo "sasl.mechanism=SCRAM-SHA-512"
      echo "sasl.jaas.config=$jaas"
      echo "ssl.truststore.type=PEM"
      echo "ssl.truststore.location=$TLS_DIR/ca.pem"
    } >"$ADMIN_PROPS"
  )
}

# Lines of server.properties for the SASL_SSL listener, SCRAM and the authorizer.
secure_server_props() {
  echo "listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT"
  echo "advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT"
  echo "controller.listener.names=CONTROLLER"
  echo "inter.broker.listener.name=SASL_SSL"
  echo "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
  echo "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256"
  echo "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"
  echo "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$(secure_password admin)\";"
  echo "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
  echo "ssl.keystore.type=PKCS12"
  echo "ssl.keystore.location=$TLS_DIR/broker.p12"
  echo "ssl.keystore.password=$(cat "$SECRETS_DIR/keystore.password")"
  echo "ssl.truststore.type=PEM"
  echo "ssl.truststore.location=$TLS_DIR/ca.pem"
  echo "ssl.endpoint.identification.algorithm=https"
  echo "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
  echo "allow.everyone.if.no.acl.found=false"
  echo "super.users=User:admin;User:ANONYMOUS"
}

# Lines of controller.properties: ACLs live in the metadata log, and the controller checks the
# requests the broker forwards (CreateAcls, CreateTopics) with the same authorizer.
secure_controller_props() {
  echo "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
  echo "allow.everyone.if.no.acl.found=false"
  echo "super.users=User:admin;User:ANONYMOUS"
}

# `kafka-storage format` arguments that create the SCRAM users (SHA-512 and SHA-256 each).
secure_format_args() {
  local user mechanism
  for user in "${SECURE_USERS[@]}"; do
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
      printf '%s\n' --add-scram "$mechanism=[name=$user,password=$(secure_password "$user")]"
    done
  done
}

# The settings (docs/settings.md) of a client that connects as user $1: KEY=VALUE lines.
secure_client_env() {
  [[ -s $SECRETS_DIR/$1.password ]] || die "no such user '$1' (users: ${SECURE_USERS[*]})"
  echo "KAFKA_BOOTSTRAP_SERVERS=$BOOTSTRAP"
  echo "KAFKA_SECURITY_PROTOCOL=SASL_SSL"
  echo "KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
  echo "KAFKA_SASL_USERNAME=$1"
  echo "KAFKA_SASL_PASSWORD_FILE=$SECRETS_DIR/$1.password"
  echo "KAFKA_SSL_CAFILE=$TLS_DIR/ca.pem"
}
