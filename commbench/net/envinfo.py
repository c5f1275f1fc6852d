"""What was true about the environment during a run: an allow-listed environment snapshot and
the interface that carried the traffic.

Secrets never leave this module. `env_snapshot` is the one place the environment is read for
storing or printing (the results' `env` column, the per-host `net` facts, doctor's JSON and
text, the reports that show them): a value is recorded only for a name on `KNOWN_SETTINGS`, the
documented settings of NCCL (its environment page and the NCCL_PARAM / ncclGetEnv names of its
source), gloo, UCX, libfabric, CUDA and torch.distributed, plus the launcher ids. Any other name
under one of those stacks' prefixes (`SETTING_PREFIXES`: NCCL_PASS, UCX_MY_TOKN, a setting newer
than this list) is kept with the value `<not recorded>`, so a reader sees that it was set but
never what it held; every other name is dropped. A name that looks like a credential (TOKEN,
SECRET, PASSW, KEY, ...) is dropped entirely, even on the list.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

NOT_RECORDED = "<not recorded>"
# The stacks whose settings a run records: a name under one of these that is not a known setting is
# stored as NOT_RECORDED.
SETTING_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "FI_", "CUDA_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_",
                    "MASTER_")


def _names(prefix: str, text: str) -> frozenset[str]:
    return frozenset(prefix + word for word in text.split())


# NCCL: docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html (current and archived releases)
# and every NCCL_PARAM / ncclGetEnv name in NVIDIA/nccl's src; the NCCL_ASYNC_ERROR_HANDLING,
# NCCL_BLOCKING_WAIT and NCCL_DESYNC_DEBUG that torch still reads.
NCCL_SETTINGS = _names("NCCL_", """
    ALGO ALLGATHERV_ENABLE ALLOC_P2P_NET_LL_BUFFERS ASYNC_ERROR_HANDLING BLOCKING_WAIT BUFFSIZE
    CGA_CLUSTER_SIZE CHECKS_DISABLE CHECK_MODE CHECK_POINTERS CHUNK_SIZE COLLNET_ENABLE
    COLLNET_NODE_THRESHOLD COMM_BLOCKING COMM_ID COMM_SHRINK_SHARE_RESOURCES
    COMM_SPLIT_SHARE_RESOURCES CONF_FILE CONNECT_ROUND_MAX_PEERS CROSS_NIC CTA_POLICY CUMEM_ENABLE
    CUMEM_HOST_ENABLE DEBUG DEBUG_FILE DEBUG_SUBSYS DEBUG_TIMESTAMP_FORMAT DEBUG_TIMESTAMP_LEVELS
    DESYNC_DEBUG DEV_API_JIT DISABLE_MEM_MANAGER DMABUF_ENABLE ELASTIC_BUFFER_REGISTER
    ENABLE_VERSION_CHECK ENV_PLUGIN GDAKI_USE_RELIABLE_DB GDRCOPY_ENABLE GDRCOPY_FIFO_ENABLE
    GDRCOPY_FLUSH_ENABLE GDRCOPY_SYNC_ENABLE GDR_FLUSH_DISABLE GIN_CONNECTION_RAIL GIN_ENABLE
    GIN_ERROR_QUERY_SEC GIN_GDAKI_MAX_DEST_RD_ATOMIC GIN_GDAKI_MAX_QP_RD_ATOMIC
    GIN_GDAKI_NIC_HANDLER GIN_GDAKI_QP_DEPTH GIN_IB_TC GIN_NCONNECTIONS GIN_PLUGIN
    GIN_PLUGIN_REF_COUNT GIN_PROXY_QUEUE_SIZE GIN_TYPE GRAPH_DUMP_FILE GRAPH_DUMP_FILE_RANK
    GRAPH_FILE GRAPH_HELPER_DISABLE GRAPH_MIXING_SUPPORT GRAPH_REGISTER GRAPH_STREAM_ORDERING
    GROUP_CUDA_STREAM HOSTID IBVERBS_LIB IB_ADAPTIVE_ROUTING IB_ADDR_FAMILY IB_ADDR_RANGE
    IB_AR_THRESHOLD IB_CUDA_SUPPORT IB_DATA_DIRECT IB_DEVICE_PCI_ORDER IB_DISABLE IB_ECE_ENABLE
    IB_FIFO_TC IB_GDR_LEVEL IB_GID_INDEX IB_HCA IB_MERGE_NICS IB_MERGE_VFS IB_MQP_RETRY_ALL
    IB_MQP_RETRY_CNT IB_MQP_RETRY_SLEEP_MSEC IB_OOO_RQ IB_PCI_RELAXED_ORDERING IB_PKEY
    IB_PREPOST_RECEIVE_WORK_REQUESTS IB_QPS_PER_CONNECTION IB_QUERY_PORT_SPEED
    IB_RECEIVER_SIDE_MATCHING_SCHEME IB_RESILIENCY_PORT_FAILOVER
    IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY
    IB_RESILIENCY_PORT_RECOVERY IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX
    IB_RESILIENCY_PORT_RECOVERY_START_DELAY IB_RETRY_CNT IB_RETURN_ASYNC_EVENTS IB_ROCE_VERSION_NUM
    IB_ROUTABLE_FLID_GID_INDEX IB_SL IB_SPLIT_DATA_ON_QPS IB_SUBNET_AWARE_ROUTING
    IB_SUBNET_PREFIX_LEN IB_TC IB_TIMEOUT IB_USE_INLINE IB_WARN_RAIL_LOCAL IGNORE_COLLNET_MISMATCH
    IGNORE_CPU_AFFINITY IGNORE_DISABLED_P2P IGNORE_NET_MISMATCH IPC_USE_ABSTRACT_SOCKET
    L1_SHARED_MEMORY_CARVEOUT LAUNCH_MODE LAUNCH_ORDER_IMPLICIT LAUNCH_RACE_FATAL
    LEGACY_CUDA_REGISTER LL128_BUFFSIZE LL128_C2C LL128_NTHREADS LL_BUFFSIZE LL_THRESHOLD
    LOCAL_REGISTER LSA_TEAM_SIZE MAX_CTAS MAX_NCHANNELS MAX_NRINGS MAX_P2P_NCHANNELS MEM_SYNC_DOMAIN
    MIN_CTAS MIN_NCHANNELS MIN_NRINGS MIN_P2P_NCHANNELS MLOPART_RDMA_ENABLE MNNVL_CLIQUE_ID
    MNNVL_CROSS_CLIQUE MNNVL_ENABLE MNNVL_RAIL_PER_HOST MNNVL_SCATTER_NETS_ENABLE MNNVL_UUID
    MULTI_RANK_GPU_ENABLE MULTI_SEGMENT_REGISTER NCHANNELS_PER_NET_PEER NET NETDEVS_POLICY
    NET_DISABLE_INTRA NET_FORCE_FLUSH NET_FORCE_MERGE NET_GDR_C2C NET_GDR_LEVEL NET_GDR_MLOPART
    NET_GDR_READ NET_MERGE_LEVEL NET_MERGE_POLICY NET_OPTIONAL_RECV_COMPLETION NET_OVERHEAD
    NET_PLUGIN NET_PLUGIN_REF_COUNT NET_SHARED_BUFFERS NET_SHARED_COMMS NO_CACHE NSOCKS_PERTHREAD
    NTHREADS NUM_RMA_CTX NVB_DISABLE NVB_PRECONNECT NVLINK_UTIL_CENTRIC_SCHED_ENABLE
    NVLSTREE_MAX_CHUNKSIZE NVLS_CHUNKSIZE NVLS_ENABLE NVLS_NCHANNELS NVTX_DISABLE OOB_NET_ENABLE
    OOB_NET_IFNAME P2P_DIRECT_DISABLE P2P_DISABLE P2P_EPOCH_ENABLE P2P_LEVEL P2P_LL_THRESHOLD
    P2P_MAX_PEERS P2P_NET_CHUNKSIZE P2P_NVL_CHUNKSIZE P2P_PCI_CHUNKSIZE P2P_PER_CHANNEL_NET_BW
    P2P_PXN_LEVEL P2P_READ_ENABLE P2P_SCHEDULE_GROUP_SIZE P2P_USE_CUDA_MEMCPY PARAM_DUMP_ALL
    PAT_ENABLE PROFILER_PLUGIN PROGRESS_APPENDOP_FREQ PROTO PROXY_APPEND_BATCH_SIZE PROXY_CPUSET
    PROXY_DUMP_SIGNAL PXN_C2C PXN_DISABLE RAS_ADDR RAS_ENABLE RAS_TIMEOUT_FACTOR
    REPORT_CONNECT_PROGRESS RINGS RMA_DISABLE RMA_PLUGIN RMA_PLUGIN_REF_COUNT RMA_PROXY_DUMP_SIGNAL
    RMA_PROXY_QUEUE_SIZE RUNTIME_CONNECT SET_CPU_STACK_SIZE SET_STACK_SIZE SET_THREAD_NAME
    SHADOW_MEMPOOL_MAX_SIZE SHM_DISABLE SHM_LOCALITY SINGLE_PROC_MEM_REG_ENABLE
    SINGLE_RING_THRESHOLD SOCKET_FAMILY SOCKET_IFNAME SOCKET_INLINE SOCKET_MAGIC SOCKET_MIN_TASKSIZE
    SOCKET_NTHREADS SOCKET_POLL_TIMEOUT_MSEC SOCKET_RCVBUF SOCKET_RETRY_CNT SOCKET_RETRY_SLEEP_MSEC
    SOCKET_SNDBUF SYM_CE_THRESHOLD SYM_CTAS SYM_GIN_KERNELS_ENABLE SYM_KERNEL SYM_NOWIN_ENABLE
    SYM_REUSE_SYSMEM_HANDLES SYM_RS_GIN_CHUNK_SIZE SYM_TMA_ENABLE THREAD_THRESHOLDS TOPO_DUMP_FILE
    TOPO_DUMP_FILE_RANK TOPO_FILE TOPO_SPLIT_MLOPART TREE_THRESHOLD TUNER_PLUGIN UID_STAGGER_RATE
    UID_STAGGER_THRESHOLD UNPACK_DOUBLE_NCHANNELS WARN_ENABLE_DEBUG_INFO WIN_ENABLE WIN_STRIDE
    WORK_ARGS_BYTES WORK_FIFO_BYTES WORK_FIFO_DEPTH
""")
GLOO_SETTINGS = _names("GLOO_", """SOCKET_IFNAME DEVICE_TRANSPORT LOG_LEVEL USE_LIBUV DISABLE_CONNECTION_RETRIES
    ENABLE_RANK_AS_SEQUENCE_NUMBER ENABLE_STORE_V2_API""") | {"TORCH_GLOO_LAZY_INIT"}
# torch.distributed: docs.pytorch.org torch_nccl_environment_variables and ProcessGroupNCCL.hpp
TORCH_SETTINGS = _names("TORCH_NCCL_", """ASYNC_ERROR_HANDLING HIGH_PRIORITY BLOCKING_WAIT DUMP_ON_TIMEOUT
    DESYNC_DEBUG ENABLE_TIMING ENABLE_MONITORING HEARTBEAT_TIMEOUT_SEC TRACE_BUFFER_SIZE TRACE_CPP_STACK
    WAIT_TIMEOUT_DUMP_MILSEC COORD_CHECK_MILSEC ABORT_IN_DESTROY_PG AVOID_RECORD_STREAMS
    USE_TENSOR_REGISTER_ALLOCATOR_HOOK DEBUG_INFO_PIPE_FILE DEBUG_INFO_TEMP_FILE NAN_CHECK CUDA_EVENT_CACHE
    USE_COMM_NONBLOCKING LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN PROPAGATE_ERROR RETHROW_CUDA_ERRORS
    EXTRA_DUMP_ON_EXEC""") | _names("TORCH_DISTRIBUTED_", "DEBUG")
UCX_SETTINGS = _names("UCX_", """TLS NET_DEVICES IB_GID_INDEX IB_SL IB_TRAFFIC_CLASS IB_PCI_RELAXED_ORDERING
    IB_REG_METHODS IB_ADDR_TYPE IB_ROCE_LOCAL_SUBNET IB_ROCE_SUBNET_PREFIX_LEN RNDV_THRESH RNDV_SCHEME
    ZCOPY_THRESH MAX_RNDV_RAILS MAX_EAGER_RAILS RC_TIMEOUT RC_RETRY_COUNT UNIFIED_MODE MEMTYPE_CACHE
    SOCKADDR_TLS_PRIORITY PROTO_ENABLE LOG_LEVEL WARN_UNUSED_ENV_VARS TCP_CM_REUSEADDR""")
# libfabric (fi_provider(7), fi_efa(7)) and the EFA settings aws-ofi-nccl users set
FI_SETTINGS = _names("FI_", """PROVIDER PROVIDER_PATH LOG_LEVEL LOG_PROV LOG_SUBSYS HMEM HMEM_CUDA_USE_GDRCOPY
    HMEM_CUDA_ENABLE_XFER UNIVERSE_SIZE FORK_UNSAFE EFA_USE_DEVICE_RDMA EFA_FORK_SAFE EFA_ENABLE_SHM_TRANSFER
    EFA_USE_HUGE_PAGE EFA_TX_MIN_CREDITS EFA_RX_WINDOW_SIZE EFA_TX_QUEUE_SIZE EFA_RX_QUEUE_SIZE EFA_CQ_SIZE
    EFA_MR_CACHE_ENABLE EFA_MR_MAX_CACHED_COUNT EFA_MR_MAX_CACHED_SIZE EFA_SET_CUDA_SYNC_MEMOPS
    EFA_INTER_MAX_MEDIUM_MESSAGE_SIZE EFA_INTER_MIN_READ_MESSAGE_SIZE EFA_INTER_MIN_READ_WRITE_SIZE
    EFA_MAX_MEMCPY_SIZE EFA_RECVWIN_SIZE EFA_IFACE EFA_USE_ZCPY_RX EFA_ENABLE_RDMA_READ""")
# CUDA: the CUDA C Programming Guide's environment variables
CUDA_SETTINGS = _names("CUDA_", """VISIBLE_DEVICES DEVICE_ORDER DEVICE_MAX_CONNECTIONS DEVICE_MAX_COPY_CONNECTIONS
    LAUNCH_BLOCKING MODULE_LOADING MODULE_DATA_LOADING CACHE_DISABLE CACHE_MAXSIZE CACHE_PATH FORCE_PTX_JIT
    DISABLE_PTX_JIT FORCE_JIT DISABLE_JIT AUTO_BOOST SCALE_LAUNCH_QUEUES MANAGED_FORCE_DEVICE_ALLOC
    ENABLE_COREDUMP_ON_EXCEPTION DEVICE_WAITS_ON_EXCEPTION MPS_ACTIVE_THREAD_PERCENTAGE""")
# The launchers' ids (torchrun, Slurm, Open MPI) and the rendezvous address.
ALLOWED_NAMES = frozenset({
    "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID",
    "SLURM_CLUSTER_NAME", "SLURM_JOB_PARTITION",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
})
KNOWN_SETTINGS = (NCCL_SETTINGS | GLOO_SETTINGS | TORCH_SETTINGS | UCX_SETTINGS | FI_SETTINGS | CUDA_SETTINGS
                  | ALLOWED_NAMES)
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|AUTH|(^|_)KEY$)", re.IGNORECASE)

# /sys/class/net/IF/type values (include/uapi/linux/if_arp.h)
ARPHRD = {"1": "ethernet", "32": "infiniband", "772": "loopback"}


def env_snapshot(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment as commbench stores and prints it: known settings with their values, other
    names under SETTING_PREFIXES as NOT_RECORDED, nothing else; credential-like names never."""
    environ = os.environ if environ is None else environ
    kept = {}
    for name, value in environ.items():
        if not isinstance(name, str) or _SECRETISH.search(name):
            continue
        if name in KNOWN_SETTINGS:
            kept[name] = value
        elif name.startswith(SETTING_PREFIXES):
            kept[name] = NOT_RECORDED
    return dict(sorted(kept.items()))


def _iface_for_address(local_ip: str) -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == local_ip for a in addrs):
            return name
    return None


def traffic_iface(master_addr: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The interface the collectives use: the one named by GLOO/NCCL_SOCKET_IFNAME, else the
    one the kernel routes MASTER_ADDR through (a UDP connect picks the route; nothing is sent)."""
    import psutil

    environ = os.environ if environ is None else environ
    here = psutil.net_if_stats()  # this network namespace's interfaces (/sys/class/net may show another)
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = environ.get(var, "")
        first = value.split(",")[0].lstrip("=")
        if first and not first.startswith("^") and first in here:
            return first
    if not master_addr:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_addr, 9))
            local_ip = s.getsockname()[0]
    except OSError:
        return None
    return _iface_for_address(local_ip)


def hw_type(iface: str) -> str | None:
    """The interface's ARPHRD type ('1' ethernet, '32' infiniband, '772' loopback) from the
    SIOCGIFHWADDR ioctl, for this process's network namespace; None if there is no such interface."""
    import fcntl
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            res = fcntl.ioctl(s.fileno(), 0x8927, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFHWADDR
    except OSError:
        return None
    return str(struct.unpack("H", res[16:18])[0])


def _live_link(iface: str) -> dict:
    """MTU, type, speed and state from the kernel for the calling process's network namespace
    (sysfs shows the namespace that mounted it, which inside a lab host is the wrong one)."""
    import psutil

    stats = psutil.net_if_stats().get(iface)
    arphrd = hw_type(iface)
    return {
        "mtu": stats.mtu if stats else None,
        "type": arphrd,
        "speed": str(stats.speed) if stats else None,
        "operstate": ("up" if stats.isup else "down") if stats else None,
    }


def iface_facts(iface: str | None, sysfs: Path | None = None) -> dict:
    """MTU, link layer, speed and state of one interface: live from the kernel, or read from a
    recorded sysfs tree (a folder laid out like /sys/class/net) when `sysfs` is given."""
    if not iface:
        return {"iface": None, "mtu": None, "link_layer": None}

    read: Callable[[str], str | None]
    if sysfs is None:
        live = _live_link(iface)
        read = live.get
    else:
        def read(name: str) -> str | None:
            try:
                return (sysfs / iface / name).read_text().strip()
            except OSError:
                return None

    mtu = read("mtu")
    speed = read("speed")
    kind = read("type")
    return {
        "iface": iface,
        "mtu": int(mtu) if mtu is not None and str(mtu).isdigit() else None,
        "link_layer": ARPHRD.get(kind or "", kind),
        "speed_mbps": int(speed) if speed and str(speed).lstrip("-").isdigit() and int(speed) > 0 else None,
        "operstate": read("operstate"),
    }
