"""deploy/kubernetes: the manifests parse and agree with each other, with the Containerfile and
with scripts/image.sh. Run by deploy_test.cc as: python3 deploy_manifests_check.py REPO_DIR."""
import json
import re
import sys

import yaml

repo = sys.argv[1]
k8s = repo + '/deploy/kubernetes'


def load(name):
    return list(yaml.safe_load_all(open(k8s + '/' + name)))


def by_kind(docs, kind):
    found = [d for d in docs if d['kind'] == kind]
    assert len(found) == 1, (kind, len(found))
    return found[0]


def parse_bytes(q):
    units = {'G': 2**30, 'Gi': 2**30, 'M': 2**20, 'Mi': 2**20}
    for u in sorted(units, key=len, reverse=True):
        if q.endswith(u):
            return float(q[:-len(u)]) * units[u]
    return float(q)


def flag(args, name):
    """The value of --name=V or --name V in a container's args, else None."""
    for i, a in enumerate(args):
        if a.startswith(name + '='):
            return a.split('=', 1)[1]
        if a == name:
            return args[i + 1]
    return None


image = re.search(r'IMAGE=\$\{KVW_IMAGE:-([^}]+)\}', open(repo + '/scripts/image.sh').read())[1]
entrypoint = json.loads(
    re.search(r'^ENTRYPOINT (\[.*\])$', open(repo + '/Containerfile').read(), re.M)[1])


def check_kvwarden_container(c):
    """The image scripts/image.sh builds; args extend its entrypoint; memory limit follows the
    budget; liveness on /health, readiness on /ready."""
    assert c['image'] == image, (c['image'], image)
    assert c['imagePullPolicy'] == 'IfNotPresent', 'a :latest tag is pulled Always otherwise'
    assert entrypoint[:2] == ['kvwarden', 'serve'], entrypoint
    for a in c['args']:
        assert a != 'serve' and not a.startswith('--host'), 'repeats the entrypoint: ' + a
    assert c['livenessProbe']['httpGet']['path'] == '/health'
    assert c['readinessProbe']['httpGet']['path'] == '/ready'
    budget = flag(c['args'], '--memory-budget')
    assert budget, c['args']
    limit = parse_bytes(c['resources']['limits']['memory'])
    assert limit >= parse_bytes(budget), (limit, budget)
    assert limit - parse_bytes(budget) <= 2 * 2**30, 'limit far above the budget wastes the node'


dep = by_kind(load('deployment.yaml'), 'Deployment')
check_kvwarden_container(dep['spec']['template']['spec']['containers'][0])
assert dep['spec']['template']['spec']['securityContext']['runAsNonRoot'] is True
svc = by_kind(load('service.yaml'), 'Service')
assert svc['spec']['selector'] == dep['spec']['selector']['matchLabels']
pm = by_kind(load('podmonitor.yaml'), 'PodMonitor')
assert pm['spec']['podMetricsEndpoints'][0]['path'] == '/metrics'
cm = by_kind(load('prometheus-scrape-config.yaml'), 'ConfigMap')
prom = yaml.safe_load(cm['data']['prometheus.yml'])
assert prom['scrape_configs'][0]['job_name'] == 'kvwarden'

# llm-d: the InferencePool selects the replicas, names the picker's Service and port; the
# picker's prefix scorer matches the replicas' block size, model and KV-events publisher.
pool_docs, epp_docs = load('llm-d/kvwarden-pool.yaml'), load('llm-d/epp.yaml')
replicas = by_kind(pool_docs, 'Deployment')
rc = replicas['spec']['template']['spec']['containers'][0]
check_kvwarden_container(rc)
ports = {p['name']: p['containerPort'] for p in rc['ports']}
pool = by_kind(pool_docs, 'InferencePool')
assert pool['apiVersion'] == 'inference.networking.k8s.io/v1', pool['apiVersion']
assert pool['spec']['selector']['matchLabels'] == replicas['spec']['template']['metadata']['labels']
assert [p['number'] for p in pool['spec']['targetPorts']] == [ports['http']]
route = by_kind(pool_docs, 'HTTPRoute')
backend = route['spec']['rules'][0]['backendRefs'][0]
assert (backend['group'], backend['kind'], backend['name']) == (
    'inference.networking.k8s.io', 'InferencePool', pool['metadata']['name'])

epp_svc = by_kind(epp_docs, 'Service')
ref = pool['spec']['endpointPickerRef']
assert ref['name'] == epp_svc['metadata']['name']
assert ref['port']['number'] in [p['port'] for p in epp_svc['spec']['ports']]
epp_dep = by_kind(epp_docs, 'Deployment')
epp = epp_dep['spec']['template']['spec']['containers'][0]
assert flag(epp['args'], '--pool-name') == pool['metadata']['name']
assert epp_svc['spec']['selector'] == epp_dep['spec']['selector']['matchLabels']
config_file = flag(epp['args'], '--config-file')
epp_cm = by_kind(epp_docs, 'ConfigMap')
config = yaml.safe_load(epp_cm['data'][config_file.rsplit('/', 1)[1]])
assert config['kind'] == 'EndpointPickerConfig'
plugins = {p['type']: p.get('parameters', {}) for p in config['plugins']}
profile = [p['pluginRef'] for p in config['schedulingProfiles'][0]['plugins']]
assert set(profile) <= set(plugins), profile
assert {'precise-prefix-cache-scorer', 'kv-cache-utilization-scorer', 'queue-scorer'} <= set(profile)
scorer = plugins['precise-prefix-cache-scorer']
assert scorer['tokenProcessorConfig']['blockSize'] == int(flag(rc['args'], '--block-size'))
served = flag(rc['args'], '--served-model-name')
assert scorer['indexerConfig']['tokenizersPoolConfig']['modelName'] == served
events = json.loads(flag(rc['args'], '--kv-events-config'))
assert events['enable_kv_cache_events'] is True and events['publisher'] == 'zmq'
assert events['endpoint'] == 'tcp://*:%d' % ports['kv-events'], events['endpoint']
kv = scorer['kvEventsConfig']
assert kv['discoverPods'] is True
assert kv['podDiscoveryConfig']['socketPort'] == ports['kv-events']
assert events['topic'].startswith(kv['topicFilter']), (events['topic'], kv['topicFilter'])
assert events['topic'].endswith('@' + served), events['topic']
print('ok')
