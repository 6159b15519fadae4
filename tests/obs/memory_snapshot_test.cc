// /debug/memory_snapshot: a pickle Python loads, with PyTorch's snapshot structure, that
// torch.cuda._memory_viz can render.
#include "obs/memory_snapshot.h"

#include <gtest/gtest.h>

#include "obs/pickle_writer.h"
#include "test_util.h"

namespace kvw::obs {
namespace {

const char* kPython = "/usr/bin/python3";

std::string run_python(const std::string& dir, const std::string& script, int* rc) {
  test::write_file(dir + "/check.py", script);
  std::string out;
  *rc = test::run_command(std::string(kPython) + " " + dir + "/check.py", &out);
  return out;
}

TEST(PickleWriter, PythonLoadsEveryValueKind) {
  KVW_REQUIRE_TOOL(test::have_program(kPython), "python3");
  PickleWriter w;
  w.begin_dict();
  w.key("ints");
  w.begin_list();
  for (int64_t v : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{65536}, int64_t{-7},
                    int64_t{1} << 40, -(int64_t{1} << 40), INT64_MAX})
    w.integer(v);
  w.end_list();
  w.key("f");
  w.real(-2.5);
  w.key("s");
  w.str("h\xc3\xa9llo");
  w.key("n");
  w.none();
  w.key("t");
  w.boolean(true);
  w.key("e");
  w.begin_dict();
  w.end_dict();
  w.end_dict();
  const std::string dir = test::temp_dir("pickle");
  test::write_file(dir + "/p.pickle", w.finish());
  int rc = 0;
  const std::string out = run_python(dir, R"(
import pickle, sys
d = pickle.load(open(sys.argv[0].replace('check.py', 'p.pickle'), 'rb'))
want = {'ints': [0, 255, 256, 65536, -7, 1 << 40, -(1 << 40), 2**63 - 1], 'f': -2.5,
        's': 'h\u00e9llo', 'n': None, 't': True, 'e': {}}
assert d == want, d
print('ok')
)",
                                     &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST(MemorySnapshot, LoadsAsTorchSnapshotAndMemoryVizRendersIt) {
  KVW_REQUIRE_TOOL(test::have_program(kPython), "python3");
  const KvSnapshot kv = test::make_snapshot(1000);
  const planner::BudgetTable b = test::make_budget(1000);
  const std::string dir = test::temp_dir("memsnap");
  test::write_file(dir + "/snap.pickle", memory_snapshot_pickle(b, &kv));
  int rc = 0;
  const std::string out = run_python(dir, R"(
import pickle, sys
snap = pickle.load(open(sys.argv[0].replace('check.py', 'snap.pickle'), 'rb'))
assert set(snap) >= {'segments', 'device_traces'}, snap.keys()
segs = snap['segments']
assert [s['kvwarden_component'] for s in segs] == ['weights', 'workspace', 'reserve', 'kv_pool']
prev_end = 0
for s in segs:
    for k in ('device', 'address', 'total_size', 'allocated_size', 'active_size', 'stream',
              'segment_type', 'blocks'):
        assert k in s, (k, s.keys())
    assert s['address'] >= prev_end, 'segments overlap'
    prev_end = s['address'] + s['total_size']
    addr = s['address']
    for b in s['blocks']:
        assert b['state'] in ('active_allocated', 'inactive'), b
        assert b['address'] == addr, 'blocks must tile the segment'
        assert b['frames'] == []
        addr += b['size']
    assert addr == s['address'] + s['total_size']
    assert s['allocated_size'] == sum(b['size'] for b in s['blocks'] if b['state'] == 'active_allocated')
kv = segs[3]
assert kv['total_size'] == 1000 * 16 * 4096
# make_snapshot: blocks i%3==0 free, else i%5==0 cached, else used -> 1000 - 334 - 133 used.
assert kv['allocated_size'] == (1000 - 334 - 133) * 16 * 4096, kv['allocated_size']
assert segs[0]['total_size'] == 300 << 20
traces = snap['device_traces']
assert len(traces) == 1
acts = [e['action'] for e in traces[0]]
assert acts[:4] == ['segment_alloc'] * 4 and set(acts[4:]) == {'alloc'}
active = sum(1 for s in segs for b in s['blocks'] if b['state'] == 'active_allocated')
assert len(acts) - 4 == active
for e in traces[0]:
    assert set(e) >= {'action', 'addr', 'size', 'stream', 'frames'}
try:
    from torch.cuda import _memory_viz as mv
except Exception as e:
    import os
    if 'torch_memory_viz' in os.environ.get('KVW_ALLOW_SKIP', '').split(','):
        print('torch not importable, viewer check skipped (KVW_ALLOW_SKIP=torch_memory_viz):', e)
        sys.exit(0)
    print('FAIL: torch not importable (python3-torch); set KVW_ALLOW_SKIP=torch_memory_viz to skip:', e)
    sys.exit(1)
ident = lambda text: text
if hasattr(mv, 'segment_plot'):          # torch >= 2.1: the memory_viz page generators
    assert len(mv.segment_plot(snap)) > 1000
    assert len(mv.trace_plot(snap)) > 1000
else:                                    # torch 1.13: flamegraph views over the segment list
    st = mv.stats(segs)
    num = lambda b: getattr(b, 'value', b)  # torch's Bytes wrapper
    assert num(st['total_size']) == sum(s['total_size'] for s in segs)
    assert num(st['active_allocated']) == sum(s['allocated_size'] for s in segs)
    lines = mv.segments(segs, format_flamegraph=ident).splitlines()
    assert len(lines) == sum(len(s['blocks']) for s in segs)
    assert mv.memory(segs, format_flamegraph=ident)
print('ok')
)",
                                     &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST(MemorySnapshot, WithoutKvSnapshotThePoolIsOneInactiveBlock) {
  KVW_REQUIRE_TOOL(test::have_program(kPython), "python3");
  const std::string dir = test::temp_dir("memsnap0");
  test::write_file(dir + "/snap.pickle", memory_snapshot_pickle(test::make_budget(10), nullptr));
  int rc = 0;
  const std::string out = run_python(dir, R"(
import pickle, sys
snap = pickle.load(open(sys.argv[0].replace('check.py', 'snap.pickle'), 'rb'))
kv = snap['segments'][-1]
assert kv['kvwarden_component'] == 'kv_pool' and kv['allocated_size'] == 0
assert [b['state'] for b in kv['blocks']] == ['inactive']
print('ok')
)",
                                     &rc);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace kvw::obs
