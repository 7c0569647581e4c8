-- ORSP: rdmacam's RDMA stream profile, as Wireshark sees it.
--
-- Decodes every ORSP message of docs/orsp-spec.md (section 5) in the payload of an InfiniBand
-- SEND, on top of Wireshark's own InfiniBand/RoCE dissector: it registers on that dissector's
-- "infiniband.payload" heuristic list and takes a payload that starts with the ORSP magic
-- ("ORSP", version 1). Every field has a filter name (orsp.type, orsp.leader.block_id,
-- orsp.announce.rkey, ...), and a message whose length disagrees with its type or counts is
-- flagged as malformed (expert info), as the camera would refuse it.
--
-- Use:  wireshark -X lua_script:wireshark/orsp.lua capture.pcap
--       tshark -X lua_script:wireshark/orsp.lua -r capture.pcap -Y orsp -V
-- or copy it into ~/.local/lib/wireshark/plugins/ to load it always.
-- Written from the spec alone; tests/tests/tshark_dissects.rs runs it on the camera's messages.

local orsp = Proto("orsp", "ORSP (rdmacam RDMA stream profile)")

local types = {
  [0x01] = "LEADER", [0x02] = "TRAILER", [0x03] = "EVENT", [0x04] = "STREAM_END",
  [0x05] = "RELEASED", [0x06] = "HELLO",
  [0x81] = "ANNOUNCE", [0x82] = "QUEUE", [0x83] = "FLUSH",
}

local codes = {
  [0x0000] = "SUCCESS", [0x8015] = "OVERFLOW (payload cut to the buffer)",
  [0x8FFF] = "frame aborted",
  [0x9001] = "retries exhausted", [0x9002] = "remote access or invalid request NAK",
  [0x9003] = "control lost", [0x9004] = "malformed host message",
  [0x9005] = "host SEND the camera could not take",
}

local payload_types = { [0x0001] = "image", [0x4001] = "image with chunk data" }

local f = orsp.fields
f.magic = ProtoField.string("orsp.magic", "Magic")
f.version = ProtoField.uint8("orsp.version", "Version")
f.type = ProtoField.uint8("orsp.type", "Type", base.HEX, types)
f.flags = ProtoField.uint16("orsp.flags", "Flags", base.HEX)
f.flag_optional = ProtoField.bool("orsp.flags.optional", "Optional", 16, nil, 0x0001)
f.flag_more = ProtoField.bool("orsp.flags.more", "More parts follow (RELEASED)", 16, nil, 0x0002)
f.length = ProtoField.uint32("orsp.length", "Length")
f.seq = ProtoField.uint32("orsp.seq", "Sequence number")

f.buffer_id = ProtoField.uint32("orsp.buffer_id", "Buffer id")
f.planned_size = ProtoField.uint64("orsp.leader.planned_size", "Planned size")
f.gvsp_status = ProtoField.uint16("orsp.gvsp.status", "GVSP status", base.HEX, codes)
f.gvsp_flags = ProtoField.uint16("orsp.gvsp.flags", "GVSP flags", base.HEX)
f.dropped_before = ProtoField.bool("orsp.leader.dropped_before", "Frames dropped before this one", 16, nil, 0x0002)
f.gvsp_format = ProtoField.uint32("orsp.gvsp.format", "GVSP extended ID and packet format", base.HEX)
f.block_id = ProtoField.uint64("orsp.block_id", "Block id")
f.packet_id = ProtoField.uint32("orsp.gvsp.packet_id", "Packet id")
f.payload_type = ProtoField.uint16("orsp.payload_type", "Payload type", base.HEX, payload_types)
f.timestamp = ProtoField.uint64("orsp.timestamp", "Timestamp (ticks)")
f.pixel_format = ProtoField.uint32("orsp.leader.pixel_format", "Pixel format (PFNC)", base.HEX)
f.width = ProtoField.uint32("orsp.leader.width", "Width")
f.height = ProtoField.uint32("orsp.leader.height", "Height")
f.offset_x = ProtoField.uint32("orsp.leader.offset_x", "Offset x")
f.offset_y = ProtoField.uint32("orsp.leader.offset_y", "Offset y")
f.padding_x = ProtoField.uint16("orsp.leader.padding_x", "Padding x")
f.padding_y = ProtoField.uint16("orsp.leader.padding_y", "Padding y")

f.status = ProtoField.uint16("orsp.trailer.status", "Status", base.HEX, codes)
f.valid_size = ProtoField.uint64("orsp.trailer.valid_size", "Valid size")
f.size_y = ProtoField.uint32("orsp.trailer.size_y", "Size y (lines)")
f.chunk_length = ProtoField.uint32("orsp.trailer.chunk_payload_length", "Chunk data payload length")
f.chunk_layout = ProtoField.uint32("orsp.trailer.chunk_layout_id", "ChunkLayoutID", base.HEX)

f.event_id = ProtoField.uint16("orsp.event.id", "Event", base.HEX, codes)
f.detail = ProtoField.uint32("orsp.event.detail", "Detail")

f.last_block_id = ProtoField.uint64("orsp.stream_end.last_block_id", "Last block id")
f.frames_sent = ProtoField.uint32("orsp.stream_end.frames_sent", "Frames sent")
f.frames_dropped = ProtoField.uint32("orsp.stream_end.frames_dropped", "Frames dropped")

f.count = ProtoField.uint32("orsp.count", "Count")
f.id = ProtoField.uint32("orsp.id", "Buffer id")

f.hello_version = ProtoField.uint32("orsp.hello.version", "ORSP version", base.HEX)
f.hello_caps = ProtoField.uint32("orsp.hello.caps", "Capabilities (ORSP_CAPS)", base.HEX)
f.hello_max_ctrl = ProtoField.uint32("orsp.hello.max_ctrl_msg", "Longest camera message")
f.hello_recv_depth = ProtoField.uint32("orsp.hello.dev_recv_depth", "Camera receive depth")
f.hello_max_buffers = ProtoField.uint32("orsp.hello.max_buffers", "Max buffers")
f.hello_path_mtu = ProtoField.uint32("orsp.hello.path_mtu", "Path MTU (bytes)")

f.announce_flags = ProtoField.uint32("orsp.announce.flags", "Flags", base.HEX)
f.announce_queue = ProtoField.bool("orsp.announce.queue", "Queue now", 32, nil, 0x1)
f.rkey = ProtoField.uint32("orsp.announce.rkey", "rkey", base.HEX)
f.address = ProtoField.uint64("orsp.announce.address", "Address", base.HEX)
f.buf_length = ProtoField.uint64("orsp.announce.length", "Length")
f.flush_flags = ProtoField.uint32("orsp.flush.flags", "Flags", base.HEX)
f.flush_forget = ProtoField.bool("orsp.flush.forget", "Forget every announced buffer", 32, nil, 0x2)

local malformed = ProtoExpert.new("orsp.malformed", "Malformed ORSP message",
  expert.group.MALFORMED, expert.severity.ERROR)
orsp.experts = { malformed }

-- the length each type must have, from its counts where it has any
local function want_length(t, tvb, len)
  if t == 0x01 then return 88
  elseif t == 0x02 then return (len == 68) and 68 or 60
  elseif t == 0x03 then return 40
  elseif t == 0x04 then return 32
  elseif t == 0x05 or t == 0x82 then
    if len < 20 then return 20 end
    return 20 + 4 * tvb(16, 4):uint()
  elseif t == 0x06 then return 40
  elseif t == 0x81 then
    if len < 24 then return 24 end
    return 24 + 24 * tvb(16, 4):uint()
  elseif t == 0x83 then return 20
  end
  return nil
end

local function dissect(tvb, pinfo, root)
  local len = tvb:len()
  if len < 16 or tvb(0, 4):string() ~= "ORSP" or tvb(4, 1):uint() ~= 1 then
    return false
  end
  local t = tvb(5, 1):uint()
  local name = types[t] or string.format("type 0x%02x", t)
  local mlen = tvb(8, 4):uint()
  local tree = root:add(orsp, tvb(0, math.min(len, math.max(mlen, 16))), "ORSP " .. name)
  tree:add(f.magic, tvb(0, 4))
  tree:add(f.version, tvb(4, 1))
  tree:add(f.type, tvb(5, 1))
  local fl = tree:add(f.flags, tvb(6, 2))
  fl:add(f.flag_optional, tvb(6, 2))
  fl:add(f.flag_more, tvb(6, 2))
  tree:add(f.length, tvb(8, 4))
  tree:add(f.seq, tvb(12, 4))
  pinfo.cols.protocol = "ORSP"
  pinfo.cols.info:set("ORSP " .. name .. " seq " .. tvb(12, 4):uint())

  local want = want_length(t, tvb, mlen)
  if mlen > len or mlen % 4 ~= 0 or (want ~= nil and mlen ~= want) then
    tree:add_proto_expert_info(malformed, string.format(
      "Malformed ORSP %s: its length field says %d bytes, its type and counts need %s, %d arrived",
      name, mlen, want and tostring(want) or "a multiple of 4", len))
    return true
  end
  local b = tvb(0, mlen)

  if t == 0x01 then
    tree:add(f.buffer_id, b(16, 4))
    tree:add(f.planned_size, b(24, 8))
    tree:add(f.gvsp_status, b(32, 2))
    local g = tree:add(f.gvsp_flags, b(34, 2))
    g:add(f.dropped_before, b(34, 2))
    tree:add(f.gvsp_format, b(36, 4))
    tree:add(f.block_id, b(40, 8))
    tree:add(f.packet_id, b(48, 4))
    tree:add(f.payload_type, b(54, 2))
    tree:add(f.timestamp, b(56, 8))
    tree:add(f.pixel_format, b(64, 4))
    tree:add(f.width, b(68, 4))
    tree:add(f.height, b(72, 4))
    tree:add(f.offset_x, b(76, 4))
    tree:add(f.offset_y, b(80, 4))
    tree:add(f.padding_x, b(84, 2))
    tree:add(f.padding_y, b(86, 2))
    pinfo.cols.info:append(string.format(": block %s into buffer %d, %dx%d",
      tostring(b(40, 8):uint64()), b(16, 4):uint(), b(68, 4):uint(), b(72, 4):uint()))
  elseif t == 0x02 then
    tree:add(f.buffer_id, b(16, 4))
    tree:add(f.status, b(20, 2))
    tree:add(f.valid_size, b(24, 8))
    tree:add(f.gvsp_status, b(32, 2))
    tree:add(f.gvsp_flags, b(34, 2))
    tree:add(f.gvsp_format, b(36, 4))
    tree:add(f.block_id, b(40, 8))
    tree:add(f.packet_id, b(48, 4))
    tree:add(f.payload_type, b(54, 2))
    tree:add(f.size_y, b(56, 4))
    if mlen == 68 then
      tree:add(f.chunk_length, b(60, 4))
      tree:add(f.chunk_layout, b(64, 4))
    end
    pinfo.cols.info:append(string.format(": block %s in buffer %d, %s bytes",
      tostring(b(40, 8):uint64()), b(16, 4):uint(), tostring(b(24, 8):uint64())))
  elseif t == 0x03 then
    tree:add(f.event_id, b(16, 2))
    tree:add(f.detail, b(20, 4))
    tree:add(f.block_id, b(24, 8))
    tree:add(f.timestamp, b(32, 8))
    pinfo.cols.info:append(string.format(": 0x%04x", b(16, 2):uint()))
  elseif t == 0x04 then
    tree:add(f.last_block_id, b(16, 8))
    tree:add(f.frames_sent, b(24, 4))
    tree:add(f.frames_dropped, b(28, 4))
  elseif t == 0x05 or t == 0x82 then
    local n = b(16, 4):uint()
    tree:add(f.count, b(16, 4))
    for i = 0, n - 1 do
      tree:add(f.id, b(20 + 4 * i, 4))
    end
    pinfo.cols.info:append(string.format(": %d buffer%s", n, n == 1 and "" or "s"))
  elseif t == 0x06 then
    tree:add(f.hello_version, b(16, 4))
    tree:add(f.hello_caps, b(20, 4))
    tree:add(f.hello_max_ctrl, b(24, 4))
    tree:add(f.hello_recv_depth, b(28, 4))
    tree:add(f.hello_max_buffers, b(32, 4))
    tree:add(f.hello_path_mtu, b(36, 4))
  elseif t == 0x81 then
    local n = b(16, 4):uint()
    tree:add(f.count, b(16, 4))
    local fa = tree:add(f.announce_flags, b(20, 4))
    fa:add(f.announce_queue, b(20, 4))
    for i = 0, n - 1 do
      local at = 24 + 24 * i
      local d = tree:add(orsp, b(at, 24), string.format("Buffer %d", b(at, 4):uint()))
      d:add(f.id, b(at, 4))
      d:add(f.rkey, b(at + 4, 4))
      d:add(f.address, b(at + 8, 8))
      d:add(f.buf_length, b(at + 16, 8))
    end
    pinfo.cols.info:append(string.format(": %d buffer%s", n, n == 1 and "" or "s"))
  elseif t == 0x83 then
    local ff = tree:add(f.flush_flags, b(16, 4))
    ff:add(f.flush_forget, b(16, 4))
  end
  return true
end

function orsp.dissector(tvb, pinfo, root)
  dissect(tvb, pinfo, root)
end

orsp:register_heuristic("infiniband.payload", dissect)
