//! Register addresses: GigE Vision bootstrap registers (`reference/gev.md` §3.3) below 0x10000,
//! the ORSP block of stream channel n at 0x10000 + 0x100·n (`docs/orsp-spec.md` §3), the camera's
//! own registers at 0x1F000..0x1F200, the GenICam XML at 0x20000.

#![allow(missing_docs)]

pub const VERSION: u32 = 0x0000;
pub const DEVICE_MODE: u32 = 0x0004;
pub const MAC_HIGH: u32 = 0x0008;
pub const MAC_LOW: u32 = 0x000C;
pub const IP_CONFIG_SUPPORTED: u32 = 0x0010;
pub const IP_CONFIG_CURRENT: u32 = 0x0014;
pub const CURRENT_IP: u32 = 0x0024;
pub const CURRENT_MASK: u32 = 0x0034;
pub const CURRENT_GATEWAY: u32 = 0x0044;
pub const MANUFACTURER_NAME: u32 = 0x0048; // 32 bytes
pub const MODEL_NAME: u32 = 0x0068; // 32
pub const DEVICE_VERSION: u32 = 0x0088; // 32
pub const MANUFACTURER_INFO: u32 = 0x00A8; // 48
pub const SERIAL_NUMBER: u32 = 0x00D8; // 16
pub const USER_NAME: u32 = 0x00E8; // 16
/// End of the block DISCOVERY_ACK returns.
pub const DISCOVERY_DATA_LEN: usize = 0x00F8;
pub const FIRST_URL: u32 = 0x0200; // 512
pub const SECOND_URL: u32 = 0x0400; // 512
pub const N_INTERFACES: u32 = 0x0600;
pub const PERSISTENT_IP: u32 = 0x064C;
pub const PERSISTENT_MASK: u32 = 0x065C;
pub const PERSISTENT_GATEWAY: u32 = 0x066C;
pub const LINK_SPEED: u32 = 0x0670;
pub const N_MESSAGE_CHANNELS: u32 = 0x0900;
pub const N_STREAM_CHANNELS: u32 = 0x0904;
pub const N_ACTION_SIGNALS: u32 = 0x0908;
pub const ACTION_DEVICE_KEY: u32 = 0x090C;
pub const N_ACTIVE_LINKS: u32 = 0x0910;
pub const SC_CAPABILITY: u32 = 0x092C;
pub const MC_CAPABILITY: u32 = 0x0930;
pub const GVCP_CAPABILITY: u32 = 0x0934;
pub const HEARTBEAT_TIMEOUT: u32 = 0x0938;
pub const TICK_FREQ_HIGH: u32 = 0x093C;
pub const TICK_FREQ_LOW: u32 = 0x0940;
pub const TIMESTAMP_CONTROL: u32 = 0x0944;
pub const TIMESTAMP_LATCHED_HIGH: u32 = 0x0948;
pub const TIMESTAMP_LATCHED_LOW: u32 = 0x094C;
pub const DISCOVERY_ACK_DELAY: u32 = 0x0950;
pub const GVCP_CONFIG: u32 = 0x0954;
pub const PENDING_TIMEOUT: u32 = 0x0958;
pub const GVSP_CONFIG: u32 = 0x0960;
pub const CCP: u32 = 0x0A00;
pub const PRIMARY_APP_PORT: u32 = 0x0A04;
pub const PRIMARY_APP_IP: u32 = 0x0A14;
/// Message channel: host port (bits 15..0), the channel's interface (19..16).
pub const MCP: u32 = 0x0B00;
/// Message channel destination address.
pub const MCDA: u32 = 0x0B10;
/// Message channel transmission timeout (ms): how long the device waits for an acknowledge.
pub const MCTT: u32 = 0x0B14;
/// Message channel retry count: how many times an unacknowledged event is sent again.
pub const MCRC: u32 = 0x0B18;
/// Message channel source UDP port.
pub const MCSP: u32 = 0x0B1C;
pub const SCP0: u32 = 0x0D00;
pub const SCPS0: u32 = 0x0D04;
pub const SCPD0: u32 = 0x0D08;
pub const SCDA0: u32 = 0x0D18;
pub const SCSP0: u32 = 0x0D1C;
pub const SCC0: u32 = 0x0D20;
pub const SCCFG0: u32 = 0x0D24;
/// Action signal n: group key at `ACTION_GROUP_KEY + 0x10 * n`, group mask 4 bytes after.
pub const ACTION_GROUP_KEY: u32 = 0x9800;
pub const ACTION_GROUP_MASK: u32 = 0x9804;
pub const ACTION_STRIDE: u32 = 0x10;
/// Action signals the device has (ActionSelector 1..=ACTIONS).
pub const ACTIONS: u32 = 2;
/// First address past the bootstrap block.
pub const BOOTSTRAP_END: u32 = 0x1_0000;

/// GVSP configuration bit: 64-bit block ids (extended-ID mode).
pub const GVSP_CONFIG_EXTENDED_ID: u32 = 0x4000_0000;
/// GVCP configuration bit: heartbeat disabled.
pub const GVCP_CONFIG_HEARTBEAT_DISABLE: u32 = 0x0000_0001;
/// GVCP configuration bit: action commands fire without a controlling host.
pub const GVCP_CONFIG_UNCONDITIONAL_ACTION: u32 = 0x0000_0008;
/// CCP bits.
pub const CCP_EXCLUSIVE: u32 = 0x1;
pub const CCP_CONTROL: u32 = 0x2;
pub const CCP_SWITCHOVER: u32 = 0x4;
/// SCPS bit: fire one test packet.
pub const SCPS_FIRE_TEST_PACKET: u32 = 0x8000_0000;
/// SCPS bit: do not fragment.
pub const SCPS_DO_NOT_FRAGMENT: u32 = 0x4000_0000;

// Camera registers (this device's own).
pub const CAM_BASE: u32 = 0x1_F000;
pub const WIDTH: u32 = 0x1_F000;
pub const HEIGHT: u32 = 0x1_F004;
pub const OFFSET_X: u32 = 0x1_F008;
pub const OFFSET_Y: u32 = 0x1_F00C;
pub const PIXEL_FORMAT: u32 = 0x1_F010;
pub const PAYLOAD_SIZE: u32 = 0x1_F014;
pub const ACQUISITION_MODE: u32 = 0x1_F018;
pub const ACQUISITION_COMMAND: u32 = 0x1_F01C;
pub const FRAME_RATE: u32 = 0x1_F020;
pub const EXPOSURE_TIME: u32 = 0x1_F024;
pub const GAIN: u32 = 0x1_F028;
pub const TEST_PATTERN: u32 = 0x1_F02C;
/// `TestPattern` Off: no test pattern, the sensor's image (replayed images in the emulator).
/// The patterns themselves are [`Pattern`](super::frame::Pattern) values 0..=3.
pub const TEST_PATTERN_OFF: u32 = 4;
pub const TL_PARAMS_LOCKED: u32 = 0x1_F030;
pub const SENSOR_WIDTH: u32 = 0x1_F034;
pub const SENSOR_HEIGHT: u32 = 0x1_F038;
pub const FRAMES_SENT: u32 = 0x1_F03C;
pub const FRAME_COUNT: u32 = 0x1_F044;
// Triggers: one block of TRIGGER_STRIDE bytes per TriggerSelector value.
pub const TRIGGER_SELECTOR: u32 = 0x1_F050;
pub const TRIGGER_MODE: u32 = 0x1_F060;
pub const TRIGGER_SOURCE: u32 = 0x1_F064;
pub const TRIGGER_ACTIVATION: u32 = 0x1_F068;
pub const TRIGGER_DELAY: u32 = 0x1_F06C;
pub const TRIGGER_SOFTWARE: u32 = 0x1_F070;
pub const TRIGGER_STRIDE: u32 = 0x20;
/// TriggerSelector values: FrameStart, AcquisitionStart.
pub const TRIGGERS: u32 = 2;
pub const FRAME_TRIGGER_MISSED: u32 = 0x1_F0A0;
// Chunks.
pub const CHUNK_MODE_ACTIVE: u32 = 0x1_F0C0;
pub const CHUNK_SELECTOR: u32 = 0x1_F0C4;
pub const CHUNK_LAYOUT_ID: u32 = 0x1_F0C8;
/// ChunkEnable of ChunkSelector value n at `CHUNK_ENABLE + 4 * n`.
pub const CHUNK_ENABLE: u32 = 0x1_F100;
// Events.
pub const EVENT_SELECTOR: u32 = 0x1_F0D0;
/// EventNotification of EventSelector value n at `EVENT_NOTIFICATION + 4 * n`.
pub const EVENT_NOTIFICATION: u32 = 0x1_F140;
// Actions.
pub const ACTION_SELECTOR: u32 = 0x1_F0E0;
// Fault injection (rdmacam's own).
pub const FAULT_SELECTOR: u32 = 0x1_F180;
pub const FAULT_COUNT: u32 = 0x1_F184;
pub const FAULT_DURATION: u32 = 0x1_F188;
pub const FAULT_INJECT: u32 = 0x1_F18C;
/// FaultInjectedCount of FaultSelector value n at `FAULT_INJECTED + 4 * n`.
pub const FAULT_INJECTED: u32 = 0x1_F1C0;
pub const CAM_END: u32 = 0x1_F200;

/// Where the GenICam XML lives in device memory.
pub const XML_BASE: u32 = 0x2_0000;
/// Bytes of device memory the XML may take.
pub const XML_WINDOW: u32 = 0x4_0000;
