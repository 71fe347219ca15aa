// Package deploy holds the tests of what deploy/ ships: the image
// (docker/Dockerfile, built by make image), the compose files (compose/),
// the Helm chart (helm/railmq) with the KEDA example (k8s/) and the
// systemd unit (systemd/). Each test drives the real tool: docker,
// docker-compose, helm and kubeconform, systemd-analyze.
package deploy
