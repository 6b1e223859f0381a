// Command kube-apiserver: the Kubernetes API server of k8s.io/kubernetes, as its cmd/kube-apiserver builds it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
