// SPDX-License-Identifier: Apache-2.0
// CCTP-shaped contracts for qtg's bridge tests and demo (issue "Bridging for real"): a USDC-like
// token per chain, a message transmitter whose receiveMessage checks an m-of-n attestation
// (Circle's Attestable) over the message and refuses a used nonce, and a token messenger whose depositForBurn burns
// and emits the message. Function, event and message shapes follow Circle's CCTP (v1), so the
// lane talks to the real contracts by configuration only. Compiled with solc 0.8.28 (npm
// `solc`, pinned in scripts/ensure-evm-tools.sh); QtgCctp_sol_*.bin are the committed bytecode,
// checked against a fresh compile by the tests.
pragma solidity 0.8.28;

/// A USDC-like token: 6 decimals; the owner names minters (the token messenger).
contract QtgUsdc {
    string public constant name = "USD Coin (qtg test)";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    address public owner;
    mapping(address => bool) public minters;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event MinterConfigured(address indexed minter, bool enabled);

    constructor(uint256 supply) {
        _initialize(supply);
    }

    /// Behind a proxy ([`QtgUsdcProxy`]) the constructor's state is not the proxy's: the first
    /// caller initializes it, once (as Circle's FiatToken `initialize`).
    function initialize(uint256 supply) external {
        _initialize(supply);
    }

    function _initialize(uint256 supply) private {
        require(owner == address(0), "FiatToken: contract is already initialized");
        owner = msg.sender;
        totalSupply = supply;
        balanceOf[msg.sender] = supply;
        emit Transfer(address(0), msg.sender, supply);
    }

    function configureMinter(address minter, bool enabled) external {
        require(msg.sender == owner, "owner");
        minters[minter] = enabled;
        emit MinterConfigured(minter, enabled);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        require(allowed >= value, "allowance");
        if (allowed != type(uint256).max) {
            allowance[from][msg.sender] = allowed - value;
        }
        _move(from, to, value);
        return true;
    }

    function mint(address to, uint256 amount) external returns (bool) {
        require(minters[msg.sender], "minter");
        require(to != address(0), "zero address");
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
        return true;
    }

    function burn(uint256 amount) external {
        require(minters[msg.sender], "minter");
        require(balanceOf[msg.sender] >= amount, "balance");
        balanceOf[msg.sender] -= amount;
        totalSupply -= amount;
        emit Transfer(msg.sender, address(0), amount);
    }

    function _move(address from, address to, uint256 value) private {
        require(to != address(0), "zero address");
        require(balanceOf[from] >= value, "balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}

/// USDC's proxy as Circle deploys it (`FiatTokenProxy`, an `AdminUpgradeabilityProxy`): the
/// implementation in slot keccak256("org.zeppelinos.proxy.implementation"), the admin in
/// keccak256("org.zeppelinos.proxy.admin"); the admin may only read and upgrade, every other
/// caller is delegated to the implementation.
contract QtgUsdcProxy {
    bytes32 private constant IMPLEMENTATION_SLOT = 0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3;
    bytes32 private constant ADMIN_SLOT = 0x10d6a54a4754c8869d6886b5f5d7fbfa5b4522237ea5c60d11bc4e7a1ff9390b;

    event Upgraded(address implementation);
    event AdminChanged(address previousAdmin, address newAdmin);

    constructor(address implementation_, address admin_) {
        _setImplementation(implementation_);
        _setAdmin(admin_);
    }

    modifier ifAdmin() {
        if (msg.sender == _admin()) {
            _;
        } else {
            _fallback();
        }
    }

    function admin() external ifAdmin returns (address) {
        return _admin();
    }

    function implementation() external ifAdmin returns (address) {
        return _implementation();
    }

    function changeAdmin(address newAdmin) external ifAdmin {
        require(newAdmin != address(0), "Cannot change the admin of a proxy to the zero address");
        emit AdminChanged(_admin(), newAdmin);
        _setAdmin(newAdmin);
    }

    function upgradeTo(address newImplementation) external ifAdmin {
        _setImplementation(newImplementation);
        emit Upgraded(newImplementation);
    }

    fallback() external payable {
        _fallback();
    }

    receive() external payable {
        _fallback();
    }

    function _fallback() private {
        require(msg.sender != _admin(), "Cannot call fallback function from the proxy admin");
        address impl = _implementation();
        assembly {
            calldatacopy(0, 0, calldatasize())
            let result := delegatecall(gas(), impl, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch result
            case 0 { revert(0, returndatasize()) }
            default { return(0, returndatasize()) }
        }
    }

    function _implementation() private view returns (address impl) {
        bytes32 slot = IMPLEMENTATION_SLOT;
        assembly {
            impl := sload(slot)
        }
    }

    function _setImplementation(address newImplementation) private {
        require(newImplementation.code.length > 0, "Cannot set a proxy implementation to a non-contract address");
        bytes32 slot = IMPLEMENTATION_SLOT;
        assembly {
            sstore(slot, newImplementation)
        }
    }

    function _admin() private view returns (address adm) {
        bytes32 slot = ADMIN_SLOT;
        assembly {
            adm := sload(slot)
        }
    }

    function _setAdmin(address newAdmin) private {
        bytes32 slot = ADMIN_SLOT;
        assembly {
            sstore(slot, newAdmin)
        }
    }
}

interface IMessageHandler {
    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody) external returns (bool);
}

/// Circle's `Attestable`, `Pausable` and owner roles as the transmitters share them: enabled
/// attesters and a signature threshold set by the attester manager, and the m-of-n check —
/// exactly `signatureThreshold` 65-byte signatures over keccak256(message), concatenated in
/// increasing order of their signers' addresses, each by an enabled attester (low-s, v 27/28, as
/// OpenZeppelin's ECDSA.recover), with Circle's revert strings.
abstract contract Attestable {
    uint256 public constant signatureLength = 65;
    address public owner;
    address public attesterManager;
    address public pauser;
    bool public paused;
    uint256 public signatureThreshold;
    address[] private attesters;
    mapping(address => bool) private enabled;

    event AttesterEnabled(address indexed attester);
    event AttesterDisabled(address indexed attester);
    event SignatureThresholdUpdated(uint256 oldSignatureThreshold, uint256 newSignatureThreshold);
    event AttesterManagerUpdated(address indexed previousAttesterManager, address indexed newAttesterManager);
    event Pause();
    event Unpause();
    event PauserChanged(address indexed newAddress);

    constructor(address initialAttester) {
        _initializeAttestable(msg.sender, initialAttester);
    }

    /// The roles (all `roles`) and the first attester, once: by the constructor, or — behind a
    /// proxy, whose storage is not the implementation's — by the transmitter's `initialize`.
    function _initializeAttestable(address roles, address initialAttester) internal {
        require(owner == address(0), "Initializable: contract is already initialized");
        owner = roles;
        attesterManager = roles;
        pauser = roles;
        signatureThreshold = 1;
        _enable(initialAttester);
    }

    function enableAttester(address newAttester) external {
        require(msg.sender == attesterManager, "Caller not attester manager");
        _enable(newAttester);
    }

    function disableAttester(address attester) external {
        require(msg.sender == attesterManager, "Caller not attester manager");
        uint256 n = attesters.length;
        require(n > 1, "Unable to disable attester");
        require(n > signatureThreshold, "Signature threshold is too low");
        require(enabled[attester], "Attester already disabled");
        enabled[attester] = false;
        for (uint256 i = 0; i < n; i++) {
            if (attesters[i] == attester) {
                attesters[i] = attesters[n - 1];
                attesters.pop();
                break;
            }
        }
        emit AttesterDisabled(attester);
    }

    function setSignatureThreshold(uint256 newSignatureThreshold) external {
        require(msg.sender == attesterManager, "Caller not attester manager");
        require(newSignatureThreshold != 0, "Invalid signature threshold");
        require(newSignatureThreshold <= attesters.length, "New signature threshold too high");
        require(newSignatureThreshold != signatureThreshold, "Signature threshold already set");
        emit SignatureThresholdUpdated(signatureThreshold, newSignatureThreshold);
        signatureThreshold = newSignatureThreshold;
    }

    function updateAttesterManager(address newAttesterManager) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(newAttesterManager != address(0), "Invalid attester manager address");
        emit AttesterManagerUpdated(attesterManager, newAttesterManager);
        attesterManager = newAttesterManager;
    }

    function isEnabledAttester(address attester) public view returns (bool) {
        return enabled[attester];
    }

    function getNumEnabledAttesters() external view returns (uint256) {
        return attesters.length;
    }

    function getEnabledAttester(uint256 index) external view returns (address) {
        return attesters[index];
    }

    function pause() external {
        require(msg.sender == pauser, "Pausable: caller is not the pauser");
        paused = true;
        emit Pause();
    }

    function unpause() external {
        require(msg.sender == pauser, "Pausable: caller is not the pauser");
        paused = false;
        emit Unpause();
    }

    function updatePauser(address newPauser) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(newPauser != address(0), "Pausable: new pauser is the zero address");
        pauser = newPauser;
        emit PauserChanged(newPauser);
    }

    function _enable(address attester) private {
        require(attester != address(0), "New attester must be nonzero");
        require(!enabled[attester], "Attester already enabled");
        enabled[attester] = true;
        attesters.push(attester);
        emit AttesterEnabled(attester);
    }

    function _verifyAttestationSignatures(bytes calldata message, bytes calldata attestation) internal view {
        require(attestation.length == signatureLength * signatureThreshold, "Invalid attestation length");
        address latest = address(0);
        bytes32 digest = keccak256(message);
        for (uint256 i = 0; i < signatureThreshold; ++i) {
            address recovered = _recover(digest, attestation[i * signatureLength:(i + 1) * signatureLength]);
            require(recovered > latest, "Invalid signature order or dupe");
            require(enabled[recovered], "Invalid signature: not attester");
            latest = recovered;
        }
    }

    /// OpenZeppelin ECDSA.recover's checks: 65 bytes, s in the lower half order, v 27 or 28.
    function _recover(bytes32 digest, bytes calldata sig) private pure returns (address signer) {
        bytes32 r = bytes32(sig[0:32]);
        bytes32 s = bytes32(sig[32:64]);
        uint8 v = uint8(sig[64]);
        require(uint256(s) <= 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0, "ECDSA: invalid signature 's' value");
        require(v == 27 || v == 28, "ECDSA: invalid signature 'v' value");
        signer = ecrecover(digest, v, r, s);
        require(signer != address(0), "ECDSA: invalid signature");
    }
}

/// Sends and receives messages: `message = version ‖ sourceDomain ‖ destinationDomain ‖ nonce ‖
/// sender ‖ recipient ‖ destinationCaller ‖ messageBody` (packed: 4, 4, 4, 8, 32, 32, 32 bytes,
/// then the body), as CCTP v1, the attestation checked m-of-n ([`Attestable`]).
contract MessageTransmitter is Attestable {
    uint32 public immutable localDomain;
    uint32 public constant version = 0;
    uint64 public nextAvailableNonce;
    /// keccak256(abi.encodePacked(sourceDomain, nonce)) => 1 once received.
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(address indexed caller, uint32 sourceDomain, uint64 indexed nonce, bytes32 sender, bytes messageBody);

    constructor(uint32 domain, address initialAttester) Attestable(initialAttester) {
        localDomain = domain;
    }

    function sendMessage(uint32 destinationDomain, bytes32 recipient, bytes calldata messageBody) external returns (uint64) {
        return _send(destinationDomain, recipient, bytes32(0), messageBody);
    }

    function sendMessageWithCaller(uint32 destinationDomain, bytes32 recipient, bytes32 destinationCaller, bytes calldata messageBody)
        external
        returns (uint64)
    {
        require(destinationCaller != bytes32(0), "Destination caller must be nonzero");
        return _send(destinationDomain, recipient, destinationCaller, messageBody);
    }

    function _send(uint32 destinationDomain, bytes32 recipient, bytes32 destinationCaller, bytes calldata messageBody)
        private
        returns (uint64 nonce)
    {
        require(!paused, "Pausable: paused");
        require(recipient != bytes32(0), "Recipient must be nonzero");
        nonce = nextAvailableNonce;
        nextAvailableNonce = nonce + 1;
        bytes32 sender = bytes32(uint256(uint160(msg.sender)));
        emit MessageSent(abi.encodePacked(version, localDomain, destinationDomain, nonce, sender, recipient, destinationCaller, messageBody));
    }

    function receiveMessage(bytes calldata message, bytes calldata attestation) external returns (bool success) {
        require(!paused, "Pausable: paused");
        _verifyAttestationSignatures(message, attestation);
        require(message.length >= 116, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[84:116]);
        require(destinationCaller == bytes32(0) || destinationCaller == bytes32(uint256(uint160(msg.sender))), "Invalid caller for message");
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");
        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        uint64 nonce = uint64(bytes8(message[12:20]));
        bytes32 sender = bytes32(message[20:52]);
        address recipient = address(uint160(uint256(bytes32(message[52:84]))));
        bytes32 used = keccak256(abi.encodePacked(sourceDomain, nonce));
        require(usedNonces[used] == 0, "Nonce already used");
        usedNonces[used] = 1;
        bytes calldata body = message[116:];
        require(IMessageHandler(recipient).handleReceiveMessage(sourceDomain, sender, body), "handleReceiveMessage() failed");
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, body);
        return true;
    }
}

/// Burns on this chain and mints what the remote messengers' messages attest: `burnMessage =
/// version ‖ burnToken ‖ mintRecipient ‖ amount ‖ messageSender` (4, 32, 32, 32, 32 bytes).
/// It is also its own local minter (Circle deploys a separate TokenMinter; `localMinter()`
/// names it either way, and the minter's reads — `burnLimitsPerMessage`, `getLocalToken`,
/// `tokenController` — are Circle's): a burn above the per-message limit is refused.
contract TokenMessenger is IMessageHandler {
    uint32 public constant messageBodyVersion = 0;
    address public owner;
    MessageTransmitter public immutable localMessageTransmitter;
    QtgUsdc public immutable localToken;
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    address public tokenController;
    mapping(address => uint256) public burnLimitsPerMessage;
    /// keccak256(abi.encodePacked(remoteDomain, remoteToken)) => local token.
    mapping(bytes32 => address) public remoteTokensToLocalTokens;

    event SetBurnLimitPerMessage(address indexed token, uint256 burnLimitPerMessage);
    event TokenPairLinked(address localToken, uint32 remoteDomain, bytes32 remoteToken);

    event DepositForBurn(
        uint64 indexed nonce,
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller
    );
    event MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken);
    event RemoteTokenMessengerAdded(uint32 domain, bytes32 tokenMessenger);

    constructor(MessageTransmitter transmitter, QtgUsdc token) {
        owner = msg.sender;
        tokenController = msg.sender;
        localMessageTransmitter = transmitter;
        localToken = token;
        // 1,000,000 USDC a message until the token controller says otherwise (Circle's start at 0).
        burnLimitsPerMessage[address(token)] = 1_000_000e6;
        emit SetBurnLimitPerMessage(address(token), 1_000_000e6);
    }

    function localMinter() external view returns (address) {
        return address(this);
    }

    function setMaxBurnAmountPerMessage(address token, uint256 burnLimitPerMessage) external {
        require(msg.sender == tokenController, "Caller is not tokenController");
        burnLimitsPerMessage[token] = burnLimitPerMessage;
        emit SetBurnLimitPerMessage(token, burnLimitPerMessage);
    }

    function linkTokenPair(address token, uint32 remoteDomain, bytes32 remoteToken) external {
        require(msg.sender == tokenController, "Caller is not tokenController");
        bytes32 key = keccak256(abi.encodePacked(remoteDomain, remoteToken));
        require(remoteTokensToLocalTokens[key] == address(0), "Unable to link token pair");
        remoteTokensToLocalTokens[key] = token;
        emit TokenPairLinked(token, remoteDomain, remoteToken);
    }

    function getLocalToken(uint32 remoteDomain, bytes32 remoteToken) external view returns (address) {
        return remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, remoteToken))];
    }

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external {
        require(msg.sender == owner, "owner");
        remoteTokenMessengers[domain] = tokenMessenger;
        emit RemoteTokenMessengerAdded(domain, tokenMessenger);
    }

    function depositForBurn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken)
        external
        returns (uint64 nonce)
    {
        return _burn(amount, destinationDomain, mintRecipient, burnToken, bytes32(0));
    }

    function depositForBurnWithCaller(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller
    ) external returns (uint64 nonce) {
        require(destinationCaller != bytes32(0), "Invalid destination caller");
        return _burn(amount, destinationDomain, mintRecipient, burnToken, destinationCaller);
    }

    /// As Circle's: only from the local transmitter, for a registered remote messenger, a burn
    /// body of the right length and version, minting the local token linked to the burned one
    /// ("Mint token not supported" when no pair is linked).
    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody) external returns (bool) {
        require(msg.sender == address(localMessageTransmitter), "Invalid message transmitter");
        require(sender != bytes32(0) && remoteTokenMessengers[sourceDomain] == sender, "Remote TokenMessenger unsupported");
        require(messageBody.length == 132, "Invalid message length");
        require(uint32(bytes4(messageBody[0:4])) == messageBodyVersion, "Invalid message body version");
        bytes32 burnToken = bytes32(messageBody[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(messageBody[36:68]))));
        uint256 amount = uint256(bytes32(messageBody[68:100]));
        address mintToken = remoteTokensToLocalTokens[keccak256(abi.encodePacked(sourceDomain, burnToken))];
        require(mintToken != address(0), "Mint token not supported");
        require(QtgUsdc(mintToken).mint(mintRecipient, amount), "Mint operation failed");
        emit MintAndWithdraw(mintRecipient, amount, mintToken);
        return true;
    }

    function _burn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken, bytes32 destinationCaller)
        private
        returns (uint64 nonce)
    {
        // Circle's checks, in Circle's order and words (TokenMessenger, then TokenMinter.burn).
        require(amount > 0, "Amount must be nonzero");
        require(mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        bytes32 destinationTokenMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationTokenMessenger != bytes32(0), "No TokenMessenger for domain");
        require(QtgUsdc(burnToken).transferFrom(msg.sender, address(this), amount), "Transfer operation failed");
        uint256 allowed = burnLimitsPerMessage[burnToken];
        require(allowed > 0, "Burn token not supported");
        require(amount <= allowed, "Burn amount exceeds per tx limit");
        QtgUsdc(burnToken).burn(amount);
        bytes memory body = abi.encodePacked(
            messageBodyVersion, bytes32(uint256(uint160(burnToken))), mintRecipient, amount, bytes32(uint256(uint160(msg.sender)))
        );
        nonce = destinationCaller == bytes32(0)
            ? localMessageTransmitter.sendMessage(destinationDomain, destinationTokenMessenger, body)
            : localMessageTransmitter.sendMessageWithCaller(destinationDomain, destinationTokenMessenger, destinationCaller, body);
        emit DepositForBurn(
            nonce, burnToken, amount, msg.sender, mintRecipient, destinationDomain, destinationTokenMessenger, destinationCaller
        );
    }
}
