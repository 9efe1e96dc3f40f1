# syntax=docker/dockerfile:1
# tpu-operator image: the release build CI makes (`cargo build --release --locked`), as a static
# binary on distroless/static, non-root. The operator is built with `--no-default-features`: the
# `local` subcommand and the emulators it embeds (kube-emulator, gcp-emulator) are left out of the
# image (`tpu-operator local` there says it was built without them).
#
#   docker build -t tpu-operator .                               # the operator (default target)
#   docker build --target gcp-emulator -t gcp-emulator .         # the emulator, for staging clusters
#
# Expected size: ~30-40 MB (distroless/static is ~2 MB; the stripped static release binary links
# kube and Google's TPU/Dataproc/Vertex/Compute Engine clients).
# The binary is static (musl), so no libc is needed; TLS trust comes from the system store
# (distroless/static ships /etc/ssl/certs) and rustls' compiled-in webpki roots.

ARG RUST_VERSION=1.91

FROM rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools cmake clang \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The same profile and lockfile CI builds with; only the target differs (musl, for a static binary).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl \
        -p tpu-operator --no-default-features \
    && cargo build --release --locked --target x86_64-unknown-linux-musl -p gcp-emulator \
    && mkdir -p /out \
    && cp target/x86_64-unknown-linux-musl/release/tpu-operator /out/ \
    && cp target/x86_64-unknown-linux-musl/release/gcp-emulator /out/ \
    && strip /out/tpu-operator /out/gcp-emulator

FROM gcr.io/distroless/static-debian12:nonroot AS gcp-emulator
COPY --from=build /out/gcp-emulator /gcp-emulator
USER 65532:65532
EXPOSE 8085
ENTRYPOINT ["/gcp-emulator"]
CMD ["--listen", "0.0.0.0:8085"]

# Last stage = default target.
FROM gcr.io/distroless/static-debian12:nonroot AS operator
COPY --from=build /out/tpu-operator /tpu-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/tpu-operator"]
CMD ["run"]
