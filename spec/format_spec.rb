# frozen_string_literal: true

require "socket"
require "zlib"
require "spec_helper"

RSpec.describe "the dump file", :unit do
  let(:path) { File.join(tmpdir, "heap.dump") }

  before { PtmallocDump.dump(path) }

  def load_bytes(bytes)
    f = File.join(tmpdir, "bad.dump")
    File.binwrite(f, bytes)
    PtmallocDump.load(f)
  end

  # The file with the given section types left out, its end section made to match (as an earlier
  # writer, which had no such sections, would have written it).
  def without_sections(bytes, types)
    body = bytes.byteslice(0, 16)
    off = 16
    n = 0
    while off < bytes.bytesize - 56
      type, _, _, length = bytes.byteslice(off, 24).unpack("LLQQ")
      size = 24 + ((length + 7) & ~7)
      unless types.include?(type)
        body << bytes.byteslice(off, size)
        n += 1
      end
      off += size
    end
    n_chunks = bytes.byteslice(bytes.bytesize - 32 + 8, 8).unpack1("Q<")
    body + [0xffff, 0, 1, 32].pack("LLQQ") + [n, n_chunks, body.bytesize, Zlib.crc32(body), 0x454d5450].pack("Q<Q<Q<L<L<")
  end

  it "reads a file of a writer that recorded no mappings or GC counts: no RSS, no GC figures" do
    dump = load_bytes(without_sections(File.binread(path), [18, 19, 23]))
    expect(dump.rss).to be_nil
    expect(dump.summary[:rss]).to be_nil
    expect(dump.header[:gc]).to be_nil
    expect(dump.ruby.objects.count).to be > 0
    expect(PtmallocDump.load(path).rss[:total]).to be > 0
  end

  it "refuses GC figures without the Ruby sections and a mappings section whose paths do not fill it" do
    bytes = File.binread(path)
    expect { load_bytes(without_sections(bytes, [11, 12, 13, 14, 15])) }.to raise_error(PtmallocDump::FormatError, /GC figures/)
    off = 16
    off += 24 + ((bytes.byteslice(off + 16, 8).unpack1("Q<") + 7) & ~7) until bytes.byteslice(off, 4).unpack1("L<") == 18
    damaged = bytes.dup
    damaged[off + 24 + 40, 8] = [bytes.byteslice(off + 24 + 40, 8).unpack1("Q<") + 8].pack("Q<") # head.paths_len
    damaged[damaged.bytesize - 8, 4] = [Zlib.crc32(damaged.byteslice(0, damaged.bytesize - 56))].pack("L<")
    expect { load_bytes(damaged) }.to raise_error(PtmallocDump::FormatError, /paths do not fill it/)
  end

  it "records which thread's tcache holds each tcache chunk, and refuses an entry that names the wrong chunk or no thread" do
    bytes = File.binread(path)
    dump = PtmallocDump.load(path)
    tcache = dump.each_chunk.select { |c| c.state == :tcache }
    expect(tcache).not_to be_empty
    expect(tcache.map { |c| dump.bin_of(c).thread }).to all(be_a(PtmallocDump::ThreadInfo))
    # each thread holds as many chunks as the walk counted in its tcache
    expect(tcache.group_by { |c| dump.bin_of(c).thread }.transform_values(&:size))
      .to eq(dump.threads.select { |t| t.tcache_count.positive? }.to_h { |t| [t, t.tcache_count] })

    older = load_bytes(without_sections(bytes, [36]))
    expect(older.bin_of(tcache.first).thread).to be_nil
    expect(older.bin_of(tcache.first).to_s).to eq("tcache bin #{(tcache.first.size - 32) / 16} (#{tcache.first.size} B)")

    off = 16
    off += 24 + ((bytes.byteslice(off + 16, 8).unpack1("Q<") + 7) & ~7) until bytes.byteslice(off, 4).unpack1("L<") == 36
    in_use = dump.each_chunk.find_index { |c| c.state == :in_use }
    { [0, in_use] => /not in a tcache/, [4, 0xffff_ffff] => /chunk or thread that does not exist/ }.each do |(field, value), message|
      damaged = bytes.dup
      damaged[off + 24 + field, 4] = [value].pack("L<")
      damaged[damaged.bytesize - 8, 4] = [Zlib.crc32(damaged.byteslice(0, damaged.bytesize - 56))].pack("L<")
      expect { load_bytes(damaged) }.to raise_error(PtmallocDump::FormatError, message)
    end
  end

  it "says where a dump of another process came from, and refuses a SOURCE section of an unknown kind",
     unit: false, ptrace: true do
    expect(PtmallocDump.load(path).header.values_at(:source, :source_info)).to eq([:self, nil])
    target = Process.spawn("sleep", "60")
    begin
      sleep 0.2
      other = File.join(tmpdir, "other.dump")
      PtmallocDump.dump_process(target, other)
    ensure
      Process.kill(:KILL, target)
      Process.wait(target)
    end
    info = PtmallocDump.load(other).header[:source_info]
    expect(info).to include(kind: :pid, pid: target, attempts: 1)
    expect(info[:unavailable]).to include(:ruby, :references, :oracles)
    bytes = File.binread(other)
    off = 16
    off += 24 + ((bytes.byteslice(off + 16, 8).unpack1("Q<") + 7) & ~7) until bytes.byteslice(off, 4).unpack1("L<") == 40
    expect(bytes.byteslice(off + 8, 16).unpack("Q<Q<")).to eq([1, 48])
    { 0 => [9, /unknown kind 9/], 40 => [1, /reserved field not zero/] }.each do |field, (value, message)|
      damaged = bytes.dup
      damaged[off + 24 + field, 4] = [value].pack("L<")
      damaged[damaged.bytesize - 8, 4] = [Zlib.crc32(damaged.byteslice(0, damaged.bytesize - 56))].pack("L<")
      expect { load_bytes(damaged) }.to raise_error(PtmallocDump::FormatError, message)
    end
    expect(load_bytes(without_sections(bytes, [40])).header[:source]).to eq(:self)
  end

  it "is written with mode 0600 and leaves no temporary file behind" do
    expect(File.stat(path).mode & 0o777).to eq(0o600)
    expect(Dir.children(tmpdir)).to eq(["heap.dump"])
  end

  it "holds at most 16 bytes per chunk plus one byte per page (and the Ruby records), and no chunk contents" do
    PtmallocDump.dump(path, ruby: false, references: false)
    dump = PtmallocDump.load(path)
    pages = dump.pages.sum(&:size)
    overhead = 64 * 1024 + dump.malloc_info.bytesize + (dump.arenas.size + dump.heaps.size) * 96
    # where each tcache chunk sits (16 bytes each: many more with glibc 2.42's larger tcaches) and the
    # mappings (56 bytes, then 88 a mapping and its path)
    overhead += dump.each_chunk.count { |c| c.state == :tcache } * 16
    overhead += 56 + dump.mappings.sum { |m| 88 + m[:path].to_s.bytesize }
    expect(File.size(path)).to be <= dump.chunk_count * 16 + pages + overhead
    expect(File.size(path)).to be <= dump.chunk_count * 8 + pages + overhead # as stored: 8 bytes a chunk
    secret = "ptmalloc-dump-secret-#{rand(1 << 30)}"
    kept = secret.dup * 4
    PtmallocDump.dump(path)
    expect(File.binread(path)).not_to include(secret)
    expect(kept).to include(secret)
  end

  it "replaces an existing file atomically and leaves the target untouched when a dump fails" do
    File.write(path, "previous")
    PtmallocDump.dump(path)
    expect(PtmallocDump.load(path).chunk_count).to be > 0
    File.write(path, "previous")
    expect { PtmallocDump.dump(path, debug_dir: File.join(tmpdir, "nowhere"), symbols: :file) }
      .to raise_error(PtmallocDump::SymbolsNotFoundError)
    expect(File.read(path)).to eq("previous")
  end

  it "refuses a target that is a symlink or a directory, and a missing directory" do
    link = File.join(tmpdir, "link.dump")
    File.symlink(File.join(tmpdir, "elsewhere"), link)
    expect { PtmallocDump.dump(link) }.to raise_error(Errno::ELOOP, /symbolic link/)
    expect(File.exist?(File.join(tmpdir, "elsewhere"))).to be(false)
    expect { PtmallocDump.dump("#{tmpdir}/") }.to raise_error(Errno::EISDIR)
    expect { PtmallocDump.dump(File.join(tmpdir, "no", "such", "dir.dump")) }.to raise_error(Errno::ENOENT, %r{no/such})
  end

  it "refuses a FIFO or a socket at the target path and leaves it there, in process and in fork mode", unit: false do
    fifo = File.join(tmpdir, "fifo.dump")
    File.mkfifo(fifo)
    expect { PtmallocDump.dump(fifo) }.to raise_error(Errno::EEXIST, /FIFO, device or socket/)
    expect { PtmallocDump.dump(fifo, fork: true, wait: true) }.to raise_error(Errno::EEXIST, /FIFO, device or socket/)
    expect(File.ftype(fifo)).to eq("fifo")
    sock_path = File.join(tmpdir, "sock.dump")
    server = UNIXServer.new(sock_path)
    expect { PtmallocDump.dump(sock_path) }.to raise_error(Errno::EEXIST)
    expect(File.ftype(sock_path)).to eq("socket")
    server.close
    expect(Dir.children(tmpdir).grep(/\.tmp-/)).to eq([])
  end

  # checks the dump against glibc's counters: no native thread of a finished Ruby thread may exit (and
  # empty its tcache) while it is taken
  it "writes a target whose name is as long as a file name can be (255 bytes)", :quiescent do
    long = File.join(tmpdir, "#{'d' * 250}.dump")
    expect(File.basename(long).bytesize).to eq(255)
    PtmallocDump.dump(long, ruby: false)
    expect_valid_dump(PtmallocDump.load(long))
    expect(Dir.children(tmpdir).grep(/\.tmp-/)).to eq([])
  end

  describe "the reader" do
    let(:bytes) { File.binread(path) }

    it "rejects an empty file" do
      expect { load_bytes("") }.to raise_error(PtmallocDump::FormatError, /empty file/)
    end

    it "rejects random bytes" do
      expect { load_bytes(Random.new(1).bytes(4096)) }.to raise_error(PtmallocDump::FormatError, /not a ptmalloc_dump dump/)
    end

    it "rejects a dump of a newer format version" do
      b = bytes.dup
      b[8, 4] = [99].pack("V")
      expect { load_bytes(b) }.to raise_error(PtmallocDump::FormatError, /format version 99 is newer/)
    end

    it "rejects every truncation" do
      [1, 15, 16, 100, bytes.size / 3, bytes.size / 2, bytes.size - 57, bytes.size - 32, bytes.size - 8, bytes.size - 1].each do |n|
        expect { load_bytes(bytes[0, n]) }.to raise_error(PtmallocDump::FormatError, /truncated|not a ptmalloc_dump/), "at #{n} bytes"
      end
    end

    it "writes zlib's CRC-32 of the body as the checksum" do
      footer = bytes.byteslice(bytes.size - 32, 32).unpack("Q<Q<Q<L<L<")
      expect(footer[2]).to eq(bytes.size - 56)
      expect(footer[3]).to eq(Zlib.crc32(bytes.byteslice(0, bytes.size - 56)))
    end

    it "rejects flipped bytes through the checksum" do
      rng = Random.new(7)
      20.times do
        b = bytes.dup
        i = 16 + rng.rand(b.size - 16 - 56)
        b.setbyte(i, b.getbyte(i) ^ (1 << rng.rand(8)))
        expect { load_bytes(b) }.to raise_error(PtmallocDump::FormatError), "flip at byte #{i}"
      end
    end

    it "says a directory is not a dump, and a missing file is missing" do
      expect { PtmallocDump.load(tmpdir) }.to raise_error(PtmallocDump::FormatError, /is a directory/)
      expect { PtmallocDump.load(File.join(tmpdir, "missing")) }.to raise_error(Errno::ENOENT)
    end
  end
end
