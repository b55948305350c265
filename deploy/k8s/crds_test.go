package k8s

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources of the two operators, written from their CRDs'
// openAPIV3Schema (Strimzi's packaging/install/cluster-operator/04*-Crd-*.yaml,
// kafka.strimzi.io/v1; Altinity's clickhouse.altinity.com/v1
// ClickHouseInstallation): the fields these manifests use, with the
// schema's enums. Decoded strictly, a misspelt field is an unknown field
// and a misspelt value is outside its enum. A field the schema has and
// these structs lack fails too: add it here, from the schema, when a
// manifest needs it.

// enum decodes a JSON string that must be one of allowed.
func enum(dst *string, b []byte, allowed ...string) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if !slices.Contains(allowed, s) {
		return fmt.Errorf("%q is not one of %q", s, allowed)
	}
	*dst = s
	return nil
}

type (
	listenerType   string
	listenerAuth   string
	authzType      string
	poolRole       string
	storageType    string
	volumeType     string
	kraftMetadata  string
	userAuthType   string
	aclType        string
	aclResource    string
	aclPattern     string
	aclOperation   string
	userAuthzType  string
	kafkaResources = corev1.ResourceRequirements
)

func (v *listenerType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "internal", "route", "loadbalancer", "nodeport", "ingress", "cluster-ip")
}
func (v *listenerAuth) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "tls", "scram-sha-512", "oauth", "custom")
}
func (v *authzType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "simple", "opa", "keycloak", "custom")
}
func (v *poolRole) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "controller", "broker")
}
func (v *storageType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "ephemeral", "persistent-claim", "jbod")
}
func (v *volumeType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "ephemeral", "persistent-claim")
}
func (v *kraftMetadata) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "shared")
}
func (v *userAuthType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "tls", "tls-external", "scram-sha-512")
}
func (v *userAuthzType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "simple")
}
func (v *aclType) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "allow", "deny")
}
func (v *aclResource) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "topic", "group", "cluster", "transactionalId")
}
func (v *aclPattern) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "literal", "prefix")
}
func (v *aclOperation) UnmarshalJSON(b []byte) error {
	return enum((*string)(v), b, "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
		"AlterConfigs", "DescribeConfigs", "IdempotentWrite", "All")
}

// Kafka is kafka.strimzi.io/v1 Kafka.
type Kafka struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Kafka struct {
			Version         string `json:"version,omitempty"`
			MetadataVersion string `json:"metadataVersion,omitempty"`
			Listeners       []struct {
				Name           string       `json:"name"`
				Port           int32        `json:"port"`
				Type           listenerType `json:"type"`
				TLS            bool         `json:"tls"`
				Authentication *struct {
					Type listenerAuth `json:"type"`
				} `json:"authentication,omitempty"`
			} `json:"listeners"`
			Authorization *struct {
				Type       authzType `json:"type"`
				SuperUsers []string  `json:"superUsers,omitempty"`
			} `json:"authorization,omitempty"`
			Config map[string]any `json:"config,omitempty"`
		} `json:"kafka"`
		EntityOperator *struct {
			TopicOperator *struct {
				Resources *kafkaResources `json:"resources,omitempty"`
			} `json:"topicOperator,omitempty"`
			UserOperator *struct {
				Resources *kafkaResources `json:"resources,omitempty"`
			} `json:"userOperator,omitempty"`
		} `json:"entityOperator,omitempty"`
	} `json:"spec"`
}

// KafkaNodePool is kafka.strimzi.io/v1 KafkaNodePool.
type KafkaNodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas int32      `json:"replicas"`
		Roles    []poolRole `json:"roles"`
		Storage  struct {
			Type    storageType `json:"type"`
			Size    string      `json:"size,omitempty"`
			Class   string      `json:"class,omitempty"`
			Volumes []struct {
				ID            int32         `json:"id"`
				Type          volumeType    `json:"type"`
				Size          string        `json:"size,omitempty"`
				Class         string        `json:"class,omitempty"`
				DeleteClaim   bool          `json:"deleteClaim,omitempty"`
				KRaftMetadata kraftMetadata `json:"kraftMetadata,omitempty"`
			} `json:"volumes,omitempty"`
		} `json:"storage"`
		Resources *kafkaResources `json:"resources,omitempty"`
	} `json:"spec"`
}

// KafkaTopic is kafka.strimzi.io/v1 KafkaTopic.
type KafkaTopic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		TopicName  string         `json:"topicName,omitempty"`
		Partitions int32          `json:"partitions"`
		Replicas   int32          `json:"replicas"`
		Config     map[string]any `json:"config,omitempty"`
	} `json:"spec"`
}

// KafkaUser is kafka.strimzi.io/v1 KafkaUser.
type KafkaUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Authentication *struct {
			Type userAuthType `json:"type"`
		} `json:"authentication,omitempty"`
		Authorization *struct {
			Type userAuthzType `json:"type"`
			ACLs []struct {
				Type     aclType `json:"type,omitempty"`
				Resource struct {
					Type        aclResource `json:"type"`
					Name        string      `json:"name,omitempty"`
					PatternType aclPattern  `json:"patternType,omitempty"`
				} `json:"resource"`
				Operations []aclOperation `json:"operations"`
				Host       string         `json:"host,omitempty"`
			} `json:"acls"`
		} `json:"authorization,omitempty"`
	} `json:"spec"`
}

// ClickHouseInstallation is clickhouse.altinity.com/v1
// ClickHouseInstallation; its pod and volume claim templates are the
// Kubernetes types themselves, decoded as strictly.
type ClickHouseInstallation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Defaults *struct {
			Templates struct {
				PodTemplate             string `json:"podTemplate,omitempty"`
				DataVolumeClaimTemplate string `json:"dataVolumeClaimTemplate,omitempty"`
				ServiceTemplate         string `json:"serviceTemplate,omitempty"`
			} `json:"templates"`
		} `json:"defaults,omitempty"`
		Configuration struct {
			Users    map[string]any `json:"users,omitempty"`
			Profiles map[string]any `json:"profiles,omitempty"`
			Settings map[string]any `json:"settings,omitempty"`
			Clusters []struct {
				Name   string `json:"name"`
				Layout struct {
					ShardsCount   int32 `json:"shardsCount"`
					ReplicasCount int32 `json:"replicasCount"`
				} `json:"layout"`
			} `json:"clusters"`
		} `json:"configuration"`
		Templates struct {
			PodTemplates []struct {
				Name string         `json:"name"`
				Spec corev1.PodSpec `json:"spec"`
			} `json:"podTemplates,omitempty"`
			VolumeClaimTemplates []struct {
				Name string                           `json:"name"`
				Spec corev1.PersistentVolumeClaimSpec `json:"spec"`
			} `json:"volumeClaimTemplates,omitempty"`
		} `json:"templates"`
	} `json:"spec"`
}
