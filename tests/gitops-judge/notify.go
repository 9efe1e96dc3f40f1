package main

// Argo CD Notifications, judged with its own engine: the `trigger.<name>` entries of an
// argocd-notifications-cm are run by github.com/argoproj/notifications-engine/pkg/triggers (the
// package Argo CD's notifications controller evaluates triggers with; `when` is an expr-lang
// expression over the variable `app`) against an Application that holds the judged object, with
// the health Argo CD would show for it in `status.resources[].health` (argo-cd
// pkg/apis/application/v1alpha1 ResourceStatus). A trigger "fires" when one of its conditions is
// true. The app's own health is the object's (one resource).

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/argoproj/notifications-engine/pkg/triggers"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// loadTriggers reads `trigger.<name>` keys: each a YAML list of conditions.
func loadTriggers(path string) (triggers.Service, []string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(text, &cm); err != nil {
		return nil, nil, err
	}
	all := map[string][]triggers.Condition{}
	var names []string
	for k, v := range cm.Data {
		name, ok := strings.CutPrefix(k, "trigger.")
		if !ok {
			continue
		}
		var conditions []triggers.Condition
		if err := yaml.UnmarshalStrict([]byte(v), &conditions); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k, err)
		}
		all[name] = conditions
		names = append(names, name)
	}
	sort.Strings(names)
	svc, err := triggers.NewService(all)
	if err != nil {
		return nil, nil, err
	}
	return svc, names, nil
}

// fired runs every trigger against an Application holding `u` with Argo CD health `health`;
// `u` nil: a resource in Git that is not live (Missing).
func fired(svc triggers.Service, names []string, u *unstructured.Unstructured, health verdict) ([]string, error) {
	resource := map[string]any{"health": map[string]any{"status": health.Status, "message": health.Message}}
	if u != nil {
		gvk := u.GroupVersionKind()
		resource["group"] = gvk.Group
		resource["version"] = gvk.Version
		resource["kind"] = gvk.Kind
		resource["namespace"] = u.GetNamespace()
		resource["name"] = u.GetName()
	}
	app := map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata":   map[string]any{"name": "ml-training", "namespace": "argocd"},
		"status": map[string]any{
			"health":    map[string]any{"status": health.Status},
			"resources": []any{resource},
		},
	}
	out := []string{}
	for _, name := range names {
		results, err := svc.Run(name, map[string]any{"app": app})
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", name, err)
		}
		for _, r := range results {
			if r.Triggered {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}
