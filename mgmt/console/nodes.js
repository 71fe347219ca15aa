'use strict';
// The nodes page (monitoring users and administrators, as /api/nodes is
// theirs): every node of the cluster as /api/nodes lists it, a node that
// does not answer shown as down, each node's alarms (memory, disk) and
// its memory, disk, file descriptors and connections against
// their limits, as the node answered this one's question (a node that did
// not answer in 2 s is down, without figures); the raft view of the
// cluster from /api/cluster (leader, voters, term). Loaded before
// console.js; uses its helpers only when called.

function pageNodes() {
  const wrap = h('div', { class: 'panel' });
  const cl = h('div', { class: 'panel', id: 'cluster' });
  main().replaceChildren(h('h1', {}, 'Nodes'), wrap, cl);
  const alarmCell = n => {
    if (!n.running) return h('span', { class: 'state-down' }, '—');
    const al = [n.mem_alarm && 'memory', n.disk_free_alarm && 'disk'].filter(Boolean);
    return al.length ? h('span', { class: 'state-blocked' }, al.join(', ') + ' alarm') : h('span', { class: 'state-running' }, 'none');
  };
  const used = (u, l, f) => (u === undefined ? '' : f(u) + (l > 0 ? ' of ' + f(l) : ''));
  poll(st.page, async () => {
    const [nodes, c] = await Promise.all([api('nodes'), api('cluster').catch(() => null)]);
    const members = new Map(((c && c.members) || []).map(m => [m.name, m]));
    wrap.replaceChildren(sortable('nodes', [
      { key: 'name', label: 'Node' },
      { key: 'running', label: 'State', get: n => (n.running ? 'running' : 'down'), cell: n => h('span', { class: n.running ? 'state-running' : 'state-down' }, n.running ? 'running' : 'down') },
      { key: 'alarms', label: 'Alarms', get: n => [n.mem_alarm && 'memory', n.disk_free_alarm && 'disk'].filter(Boolean).join(','), cell: alarmCell },
      { key: 'role', label: 'Raft', hideSm: true, get: n => { const m = members.get(n.name); return m ? (m.leader ? 'leader' : m.voter ? 'voter' : 'non-voter') : ''; } },
      { key: 'mem_used', label: 'Memory', num: true, cell: n => used(n.mem_used, n.mem_limit, fmtBytes) },
      { key: 'disk_free', label: 'Disk free', num: true, hideSm: true, cell: n => (n.disk_free === undefined ? '' : fmtBytes(n.disk_free) + ' (limit ' + fmtBytes(n.disk_free_limit) + ')') },
      { key: 'fd_used', label: 'File descriptors', num: true, hideSm: true, cell: n => used(n.fd_used, n.fd_total, fmtNum) },
      { key: 'sockets_used', label: 'Connections', num: true, hideSm: true, cell: n => (n.sockets_used === undefined ? '' : fmtNum(n.sockets_used)) },
      { key: 'uptime', label: 'Uptime', num: true, cell: n => (n.uptime === undefined ? '' : fmtAge(n.uptime / 1000)) },
      { key: 'address', label: 'Cluster address', hideSm: true, get: n => n.railmq_cluster_address || (members.get(n.name) || {}).address || '' },
    ], nodes, { redraw() {} }));
    const down = nodes.filter(n => !n.running).map(n => n.name);
    const alarmed = nodes.filter(n => n.mem_alarm || n.disk_free_alarm).map(n => n.name);
    if (down.length) banner('Node down: ' + down.join(', '), 'alarm');
    else if (alarmed.length) banner('Resource alarm on ' + alarmed.join(', ') + ' — publishers are blocked', 'alarm');
    else if ($('#banner').classList.contains('alarm')) banner('');
    if (!c) { cl.replaceChildren(h('p', { class: 'small' }, 'Cluster status needs the monitoring tag.')); return; }
    cl.replaceChildren(h('h2', {}, c.clustered ? 'Cluster' : 'Single node'), kvTable('cluster-kv', c, [['Name', 'name'], ['Raft state', 'state'], ['Leader', 'leader', v => v || 'none (no quorum)'],
      ['Term', 'term'], ['Commit index', 'commit_index', fmtNum], ['Applied index', 'applied_index', fmtNum], ['Last contact', 'last_contact_seconds', v => fmtAge(v) + ' ago']]));
  });
}
