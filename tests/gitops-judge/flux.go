package main

// Flux manifests, checked with Flux's own API types: every document of the files given to
// --flux is decoded strictly (an unknown or misplaced field is an error) into the type its
// apiVersion and kind name, from github.com/fluxcd/kustomize-controller/api and
// github.com/fluxcd/notification-controller/api. GitRepository (source-controller) is only
// checked for its kind.

import (
	"bytes"
	"fmt"
	"os"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	notifyv1beta3 "github.com/fluxcd/notification-controller/api/v1beta3"
	"sigs.k8s.io/yaml"
)

func checkFlux(path string) (int, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, doc := range bytes.Split(text, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return n, fmt.Errorf("document %d: %w", i, err)
		}
		var into any
		switch head.APIVersion + " " + head.Kind {
		case "kustomize.toolkit.fluxcd.io/v1 Kustomization":
			into = &kustomizev1.Kustomization{}
		case "notification.toolkit.fluxcd.io/v1beta3 Alert":
			into = &notifyv1beta3.Alert{}
		case "notification.toolkit.fluxcd.io/v1beta3 Provider":
			into = &notifyv1beta3.Provider{}
		case "source.toolkit.fluxcd.io/v1 GitRepository":
			n++
			continue
		default:
			return n, fmt.Errorf("document %d: %s %s is not a Flux kind this check knows", i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return n, fmt.Errorf("document %d (%s): %w", i, head.Kind, err)
		}
		n++
	}
	return n, nil
}
